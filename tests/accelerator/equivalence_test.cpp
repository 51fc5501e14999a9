// The core contract (from Accelerate's tests): training y = a·x + b for 3 epochs with
// SGD(lr 0.1) and MSE on 32·N samples gives the same parameters on N ranks
// with per-rank batch 8 (or split_batches with batch 8·N, or one rank
// accumulating N micro-batches of 8) as on one rank with batch 8·N.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include "accelerate/accelerator/accelerator.h"
#include "support/regression_problem.h"
#include "support/thread_ranks.h"

namespace {

using accelerate::testing::regression_data;

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;

struct Regression {
  at::Tensor a;
  at::Tensor b;
};

// One process, batch `batch`, the plain loop.
Regression train_reference(int64_t samples, size_t batch) {
  auto model = accelerate::testing::fresh_regression_model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  accelerate::DataLoader loader(regression_data(samples), accelerate::DataLoaderOptions(batch));
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (auto& batch_data : loader) {
      optimizer.zero_grad();
      torch::mse_loss(model->forward(batch_data.data), batch_data.target).backward();
      optimizer.step();
    }
  }
  return {model->weight.detach().clone(), model->bias.detach().clone()};
}

// The same loop, accelerated.
Regression train_accelerated(std::shared_ptr<Communicator> comm, int64_t samples, size_t batch,
                             AcceleratorOptions options) {
  Accelerator accelerator(std::move(comm), options);
  auto model = accelerate::testing::fresh_regression_model();
  accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                     torch::optim::SGDOptions(0.1));
  accelerate::DataLoader loader(regression_data(samples), accelerate::DataLoaderOptions(batch));
  accelerator.prepare(model, optimizer, loader);
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (auto& batch_data : loader) {
      // Accelerate's order: zero_grad after step, so that it does not clear
      // the gradients being accumulated at the start of a sync micro-batch.
      auto scope = accelerator.accumulate();
      accelerator.backward(torch::mse_loss(model->forward(batch_data.data), batch_data.target));
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  return {model->weight.detach().clone(), model->bias.detach().clone()};
}

void expect_same(const Regression& got, const Regression& want) {
  EXPECT_TRUE(torch::allclose(got.a, want.a, /*rtol=*/1e-5, /*atol=*/1e-6))
      << got.a << " vs " << want.a;
  EXPECT_TRUE(torch::allclose(got.b, want.b, 1e-5, 1e-6)) << got.b << " vs " << want.b;
}

class Equivalence : public ::testing::TestWithParam<int> {};

TEST_P(Equivalence, RanksWithPerRankBatchMatchOneRankWithTheGlobalBatch) {
  const int n = GetParam();
  const auto reference = train_reference(32 * n, 8 * n);
  EXPECT_FALSE(torch::allclose(
      reference.a, accelerate::testing::fresh_regression_model()->weight));  // it trained
  accelerate::testing::run_rank_communicators(n, [&](std::shared_ptr<Communicator> comm) {
    expect_same(train_accelerated(comm, 32 * n, 8, {}), reference);
  });
}

TEST_P(Equivalence, SplitBatchesWithTheGlobalBatchMatchToo) {
  const int n = GetParam();
  const auto reference = train_reference(32 * n, 8 * n);
  AcceleratorOptions options;
  options.dataloader_config(accelerate::DataLoaderConfiguration().split_batches(true));
  accelerate::testing::run_rank_communicators(n, [&](std::shared_ptr<Communicator> comm) {
    expect_same(train_accelerated(comm, 32 * n, 8 * n, options), reference);
  });
}

TEST_P(Equivalence, AccumulatingMicroBatchesMatchesOneBigBatch) {
  const int k = GetParam();  // micro-batches per step, on one rank
  const auto reference = train_reference(32 * k, 8 * k);
  AcceleratorOptions options;
  options.gradient_accumulation_steps(k);
  accelerate::testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    expect_same(train_accelerated(comm, 32 * k, 8, options), reference);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, Equivalence, ::testing::Values(1, 2, 3));

TEST(Equivalence, TwoRanksAccumulatingTwoStepsMatchOneRankWithBatch32) {
  const auto reference = train_reference(64, 32);
  AcceleratorOptions options;
  options.gradient_accumulation_steps(2);
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    expect_same(train_accelerated(comm, 64, 8, options), reference);
  });
}

}  // namespace
