// Dropout at tp (Megatron's two streams): split_dropout gives each rank of a
// group a mask of its own from one draw of the default generator, so the
// replicated stream (at::dropout) stays alike on every rank; the same seed
// gives the same masks; activation checkpointing's recomputation draws
// them again; attention's dropout_generator is where its mask comes from.
// Real ranks: threads over a FileStore, Gloo. Thread ranks share the
// default generator, so each rank's draws below run under one lock, each
// from the same seed, as separate processes seeded alike would draw them.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/distributed/communicator.h"
#include "accelerate/memory/activation_checkpointing.h"
#include "accelerate/nn/attention.h"
#include "accelerate/nn/tensor_parallel.h"
#include "support/error_message.h"
#include "support/thread_ranks.h"

namespace tensor_parallel_dropout_test {

using accelerate::Communicator;
using accelerate::TensorParallel;
using accelerate::testing::run_rank_communicators;

constexpr int64_t kElements = 20000;
constexpr double kP = 0.25;

// Every rank's `x` (same shape), rank order.
std::vector<at::Tensor> all_ranks(const at::Tensor& x, Communicator& group) {
  at::Tensor rows = at::empty({group.world_size() * x.numel()}, x.options());
  group.all_gather_into(x.contiguous(), rows);
  return rows.view({group.world_size(), x.numel()}).unbind(0);
}

// The kept fraction of a dropout mask lies within 5 standard deviations
// of 1 - p (a binomial of kElements draws).
void expect_keeps_one_minus_p(const at::Tensor& kept) {
  const double fraction = kept.to(at::kDouble).mean().item<double>();
  const double sigma = std::sqrt(kP * (1 - kP) / kElements);
  EXPECT_NEAR(fraction, 1 - kP, 5 * sigma);
}

TEST(TensorParallelDropout, WithoutTpItIsAtDropout) {
  const at::Tensor x = at::rand({kElements});
  torch::manual_seed(3);
  const at::Tensor expected = at::dropout(x, kP, /*train=*/true);
  torch::manual_seed(3);
  EXPECT_TRUE(at::equal(accelerate::split_dropout(x, kP, true, TensorParallel()), expected));
  EXPECT_FALSE(accelerate::split_dropout_generator(TensorParallel(), x).has_value());
  EXPECT_TRUE(at::equal(accelerate::split_dropout(x, kP, /*train=*/false, TensorParallel()), x));
}

TEST(TensorParallelDropout, EachRankDrawsItsOwnMaskAndTheReplicatedStreamStaysAlike) {
  std::mutex default_generator;
  run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    const TensorParallel tp(comm);
    const at::Tensor ones = at::ones({kElements});
    at::Tensor split, again, replicated, evaluated;
    {
      std::lock_guard<std::mutex> lock(default_generator);
      torch::manual_seed(11);
      split = accelerate::split_dropout(ones, kP, /*train=*/true, tp);
      // What a process draws next from the default generator (the
      // replicated activations' masks): split_dropout took one number.
      replicated = at::dropout(ones, kP, /*train=*/true);
      torch::manual_seed(11);
      again = accelerate::split_dropout(ones, kP, /*train=*/true, tp);
      evaluated = accelerate::split_dropout(ones, kP, /*train=*/false, tp);
    }
    EXPECT_TRUE(at::equal(split, again)) << "the same seed gives the same mask";
    EXPECT_TRUE(at::equal(evaluated, ones)) << "no dropout in evaluation";
    // Kept elements are scaled by 1 / (1 - p), as at::dropout's.
    const at::Tensor kept = split.ne(0);
    EXPECT_TRUE(at::allclose(split.masked_select(kept), at::full({1}, 1 / (1 - kP))));
    expect_keeps_one_minus_p(kept);
    const std::vector<at::Tensor> masks = all_ranks(kept.to(at::kFloat), *comm);
    // Independent masks agree where both keep or both drop: p^2 + (1-p)^2.
    const double agree = masks[0].eq(masks[1]).to(at::kDouble).mean().item<double>();
    EXPECT_NEAR(agree, kP * kP + (1 - kP) * (1 - kP), 0.03) << "the ranks' masks are unrelated";
    const std::vector<at::Tensor> next = all_ranks(replicated, *comm);
    EXPECT_TRUE(at::equal(next[0], next[1])) << "the replicated stream is alike on every rank";
  });
}

// A checkpointed function that drops its split part gets the gradients of
// the plain run, bitwise: the recomputation draws the same mask.
TEST(TensorParallelDropout, ActivationCheckpointingRecomputesTheSameMasks) {
  std::mutex default_generator;
  run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    const TensorParallel tp(comm);
    std::lock_guard<std::mutex> lock(default_generator);
    torch::manual_seed(5);
    const at::Tensor weight = at::randn({64, 64}).requires_grad_();
    const at::Tensor input = at::randn({8, 64});
    auto part = [&](const std::vector<at::Tensor>& in) {
      return std::vector<at::Tensor>{
          accelerate::split_dropout(at::matmul(in[0], weight), kP, /*train=*/true, tp)
              .tanh()
              .sum()};
    };
    torch::manual_seed(9);
    part({input})[0].backward();
    const at::Tensor plain = weight.grad().clone();
    weight.mutable_grad().zero_();
    torch::manual_seed(9);
    accelerate::checkpoint_function(part, {input}, {weight})[0].backward();
    EXPECT_TRUE(at::equal(weight.grad(), plain));
  });
}

TEST(TensorParallelDropout, AttentionDrawsItsMaskFromTheGivenGenerator) {
  torch::manual_seed(1);
  const at::Tensor q = at::randn({1, 2, 16, 8}), k = at::randn({1, 2, 16, 8}),
                   v = at::randn({1, 2, 16, 8});
  auto seeded = [](uint64_t seed) {
    at::Generator generator = at::detail::createCPUGenerator(seed);
    return accelerate::AttentionOptions().dropout_p(0.5).dropout_generator(generator);
  };
  const at::Tensor default_state = at::detail::getDefaultCPUGenerator().get_state();
  const at::Tensor first = accelerate::causal_attention(q, k, v, seeded(4));
  EXPECT_TRUE(at::equal(at::detail::getDefaultCPUGenerator().get_state(), default_state))
      << "the default generator drew nothing";
  EXPECT_TRUE(at::equal(accelerate::causal_attention(q, k, v, seeded(4)), first));
  EXPECT_FALSE(at::equal(accelerate::causal_attention(q, k, v, seeded(5)), first));
  const at::Tensor keys = at::ones({1, 16}, at::kLong);
  EXPECT_TRUE(at::equal(accelerate::bidirectional_attention(q, k, v, keys, seeded(4)),
                        accelerate::bidirectional_attention(q, k, v, keys, seeded(4))));
  EXPECT_TRUE(at::equal(at::detail::getDefaultCPUGenerator().get_state(), default_state));
  // Without dropout the generator changes nothing.
  EXPECT_TRUE(at::equal(accelerate::causal_attention(q, k, v, seeded(4).dropout_p(0.0)),
                        accelerate::causal_attention(q, k, v)));
  EXPECT_EQ(accelerate::testing::error_of([&] {
              accelerate::causal_attention(q, k, v,
                                           seeded(4).kernel(accelerate::AttentionKernel::kFused));
            }),
            "causal_attention: the fused kernel draws its own dropout mask; a dropout_generator "
            "needs the explicit kernel (kAuto or kExplicit)");
}

}  // namespace tensor_parallel_dropout_test
