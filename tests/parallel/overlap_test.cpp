// Overlap, observed through the statistics rather than timed: with six
// Linear(1024, 1024) layers on two ranks, buckets start from the gradient
// hooks, i.e. before backward returns.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <iostream>

#include "accelerate/parallel/gradient_reducer.h"
#include "parallel/parallel_test_support.h"
#include "support/thread_ranks.h"

using accelerate::Communicator;
using accelerate::GradientReducer;
using accelerate::GradientSyncOptions;
using namespace accelerate::testing;

namespace {

struct DeepLinearImpl : torch::nn::Module {
  explicit DeepLinearImpl(int depth) {
    for (int i = 0; i < depth; ++i) {
      layers.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(1024, 1024)));
    }
    fill_deterministic(*this);
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& layer : layers) x = torch::tanh(layer(x));
    return x;
  }
  std::vector<torch::nn::Linear> layers;
};
TORCH_MODULE(DeepLinear);

void expect_buckets_start_during_backward(const GradientSyncOptions& options,
                                          int expected_buckets) {
  torch::set_num_threads(1);
  run_ranks(2, [&](Communicator& comm) {
    DeepLinear model(6);
    GradientReducer reducer(std::shared_ptr<Communicator>(std::shared_ptr<Communicator>(), &comm),
                            model->parameters(), options);
    EXPECT_EQ(static_cast<int>(reducer.buckets().size()), expected_buckets);
    auto x = rank_data(comm.rank(), 0, {32, 1024});
    for (int step = 0; step < 3; ++step) {
      clear_grads(*model);
      model->forward(x).pow(2).mean().backward();
      reducer.finalize_backward();
      auto stats = reducer.last_step_stats();
      // Every parameter got its gradient in backward, so every bucket was
      // launched by a hook, none by finalize_backward().
      EXPECT_GE(stats.buckets_launched_during_backward, 1);
      EXPECT_EQ(stats.buckets_launched_during_backward, stats.bucket_count);
      EXPECT_GT(stats.communication_seconds, 0);
      EXPECT_LE(stats.exposed_wait_seconds, stats.finalize_seconds);
      if (comm.rank() == 0) {
        std::cout << "[ measured ] " << stats.bucket_count << " buckets, step " << step
                  << ": in flight " << stats.communication_seconds * 1e3 << " ms, waited "
                  << stats.exposed_wait_seconds * 1e3 << " ms in finalize, hidden "
                  << 100 * stats.hidden_fraction() << "%\n";
      }
    }
  });
}

TEST(Overlap, DefaultBucketsStartBeforeBackwardReturns) {
  // First bucket: the last bias (4 KiB; the 4 MiB weight would pass 1 MiB);
  // the other 24 MiB + biases fit one 25 MiB bucket.
  expect_buckets_start_during_backward(GradientSyncOptions(), 2);
}

TEST(Overlap, LayerSizedBucketsStartBeforeBackwardReturns) {
  // 4.01 MiB: each weight and the bias before it share a bucket.
  expect_buckets_start_during_backward(GradientSyncOptions().bucket_cap_mb(4.01), 7);
}

}  // namespace
