// broadcast_module_state() and GradientReducer::broadcast_buffers(): every
// rank ends with rank 0's values, without autograd history.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "accelerate/parallel/gradient_reducer.h"
#include "parallel/parallel_test_support.h"
#include "parallel/state_broadcast.h"
#include "support/thread_ranks.h"

using accelerate::Communicator;
using accelerate::GradientReducer;
using accelerate::GradientSyncOptions;
using namespace accelerate::testing;

namespace {

// Parameters plus float and integer buffers (BatchNorm keeps a 0-d long
// counter), one of them non-contiguous.
struct WithBuffersImpl : torch::nn::Module {
  WithBuffersImpl()
      : fc(register_module("fc", torch::nn::Linear(5, 3))),
        norm(register_module("norm", torch::nn::BatchNorm1d(3))) {
    strided = register_buffer("strided", torch::zeros({4, 6}).t());
  }
  torch::nn::Linear fc;
  torch::nn::BatchNorm1d norm;
  torch::Tensor strided;
};
TORCH_MODULE(WithBuffers);

// What rank `rank` starts from: everything depends on the rank.
WithBuffers model_of_rank(int rank) {
  WithBuffers model;
  fill_deterministic(*model, /*salt=*/rank);
  torch::NoGradGuard no_grad;
  model->norm->running_mean.fill_(rank + 0.5);
  model->norm->num_batches_tracked.fill_(rank + 7);
  model->strided.copy_(torch::arange(24.0).view({6, 4}) * (rank + 1));
  return model;
}

void expect_equal_lists(const std::vector<torch::Tensor>& got,
                        const std::vector<torch::Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(torch::equal(got[i], want[i])) << "tensor " << i;
  }
}

class OnRanks : public ::testing::TestWithParam<int> {};

TEST_P(OnRanks, ModuleStateBecomesRankZeros) {
  run_ranks(GetParam(), [](Communicator& comm) {
    auto model = model_of_rank(comm.rank());
    accelerate::broadcast_module_state(comm, *model);
    auto rank_zero = model_of_rank(0);
    expect_equal_lists(model->parameters(), rank_zero->parameters());
    expect_equal_lists(model->buffers(), rank_zero->buffers());
    for (const auto& p : model->parameters()) {
      EXPECT_TRUE(p.is_leaf());
      EXPECT_TRUE(p.requires_grad());
      EXPECT_FALSE(p.grad_fn());
    }
  });
}

TEST_P(OnRanks, WithoutBuffersOnlyParametersMove) {
  run_ranks(GetParam(), [](Communicator& comm) {
    auto model = model_of_rank(comm.rank());
    accelerate::broadcast_module_state(comm, *model, /*include_buffers=*/false);
    expect_equal_lists(model->parameters(), model_of_rank(0)->parameters());
    expect_equal_lists(model->buffers(), model_of_rank(comm.rank())->buffers());
  });
}

TEST_P(OnRanks, ReducerBroadcastsBuffersOnlyAndOnlyWhenAsked) {
  run_ranks(GetParam(), [](Communicator& comm) {
    auto borrowed = std::shared_ptr<Communicator>(std::shared_ptr<Communicator>(), &comm);
    auto model = model_of_rank(comm.rank());
    auto reducer = GradientReducer::for_module(borrowed, *model);
    EXPECT_TRUE(reducer->broadcast_buffers());
    expect_equal_lists(model->buffers(), model_of_rank(0)->buffers());
    expect_equal_lists(model->parameters(), model_of_rank(comm.rank())->parameters());

    auto other = model_of_rank(comm.rank());
    auto quiet = GradientReducer::for_module(borrowed, *other,
                                             GradientSyncOptions().broadcast_buffers(false));
    EXPECT_FALSE(quiet->broadcast_buffers());
    expect_equal_lists(other->buffers(), model_of_rank(comm.rank())->buffers());
  });
}

INSTANTIATE_TEST_SUITE_P(TwoAndThree, OnRanks, ::testing::Values(2, 3));

TEST(Broadcast, ManyTensorsOfMixedDtypesInSmallChunks) {
  run_ranks(3, [](Communicator& comm) {
    const double r = comm.rank();
    auto of_rank = [](double rank) {
      return std::vector<torch::Tensor>{
          torch::full({1000}, rank + 1),                        // 4000 B
          torch::full({700}, rank + 2),                         // 2800 B: 2nd chunk
          torch::full({3, 3}, static_cast<int64_t>(rank) + 3),  // long
          torch::full({9}, rank == 0, torch::kBool),            // bool
          torch::full({300}, rank + 4, torch::kBFloat16),       // bf16
          torch::full({2000}, rank + 5),                        // larger than a chunk
          torch::zeros({0}),                                    // empty
          torch::full({8, 2}, rank + 6).t()};                   // non-contiguous
    };
    auto mine = of_rank(r);
    accelerate::detail::broadcast_coalesced(comm, mine, /*chunk_bytes=*/5000);
    expect_equal_lists(mine, of_rank(0));
  });
}

}  // namespace
