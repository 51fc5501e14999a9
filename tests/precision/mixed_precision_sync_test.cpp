// Gradient sync under mixed precision, 2 thread ranks over Gloo: bf16
// parameters (Gloo cannot sum bf16: the reducer sends float32), and the
// fp16/bf16 compression hooks.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include "accelerate/common/errors.h"
#include "accelerate/parallel/gradient_reducer.h"
#include "support/thread_ranks.h"

namespace {

using accelerate::CommHook;
using accelerate::Communicator;
using accelerate::GradientReducer;
using accelerate::GradientSyncOptions;

// Rank r's gradient for a parameter of 6 values: thirds, so that fp16/bf16
// rounding is visible.
torch::Tensor rank_gradient(int rank) {
  return (torch::arange(6, torch::kDouble) + 1.0 + 10.0 * rank) / 3.0;
}

// Backward of sum(p * g_rank) through a reducer; returns the synced .grad.
torch::Tensor synced_gradient(std::shared_ptr<Communicator> comm, at::ScalarType dtype,
                              GradientSyncOptions options) {
  auto parameter = torch::zeros({6}, dtype).requires_grad_(true);
  GradientReducer reducer(comm, {parameter}, options);
  (parameter * rank_gradient(comm->rank()).to(dtype)).sum().backward();
  reducer.finalize_backward();
  return parameter.grad().clone();
}

TEST(MixedPrecisionSync, Bf16ParametersAverageThroughFloat32) {
  std::vector<torch::Tensor> got(2);
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    got[comm->rank()] = synced_gradient(comm, torch::kBFloat16, GradientSyncOptions());
  });
  // Each rank's bf16 gradient, summed in float32, halved, rounded to bf16 once.
  auto expected = ((rank_gradient(0).to(torch::kBFloat16).to(torch::kFloat) +
                    rank_gradient(1).to(torch::kBFloat16).to(torch::kFloat)) /
                   2.0)
                      .to(torch::kBFloat16);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(got[rank].scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(got[rank], expected)) << got[rank] << " vs " << expected;
  }
}

TEST(MixedPrecisionSync, Fp16HookSendsHalfPrecisionAveragesOfFloat32Gradients) {
  std::vector<torch::Tensor> plain(2), compressed(2);
  std::vector<at::ScalarType> wire(2);
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    plain[comm->rank()] = synced_gradient(comm, torch::kFloat, GradientSyncOptions());
    compressed[comm->rank()] =
        synced_gradient(comm, torch::kFloat, GradientSyncOptions().comm_hook(CommHook::kFp16));
    auto parameter = torch::zeros({6}, torch::kFloat).requires_grad_(true);
    GradientReducer reducer(comm, {parameter}, GradientSyncOptions().comm_hook(CommHook::kFp16));
    wire[comm->rank()] = reducer.buckets().at(0).wire_dtype;
  });
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(wire[rank], torch::kHalf);
    EXPECT_EQ(compressed[rank].scalar_type(), torch::kFloat);
    // Close to the float32 average, within fp16's precision...
    EXPECT_TRUE(torch::allclose(compressed[rank], plain[rank], /*rtol=*/1e-3, /*atol=*/0))
        << compressed[rank] << " vs " << plain[rank];
    // ...and every value is an fp16 number: it travelled as fp16.
    EXPECT_TRUE(
        torch::equal(compressed[rank], compressed[rank].to(torch::kHalf).to(torch::kFloat)));
    EXPECT_FALSE(torch::equal(compressed[rank], plain[rank]));
    EXPECT_TRUE(torch::equal(compressed[rank], compressed[0])) << "ranks disagree";
  }
}

TEST(MixedPrecisionSync, Bf16HookIsRefusedOnGloo) {
  std::vector<std::string> errors(2);
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    auto parameter = torch::zeros({6}, torch::kFloat).requires_grad_(true);
    try {
      GradientReducer reducer(comm, {parameter}, GradientSyncOptions().comm_hook(CommHook::kBf16));
    } catch (const accelerate::ConfigError& error) {
      errors[comm->rank()] = error.what();
    }
  });
  for (const auto& error : errors) {
    EXPECT_NE(error.find("CommHook::kFp16"), std::string::npos) << "'" << error << "'";
  }
}

TEST(MixedPrecisionSync, HooksDoNothingOnOneProcess) {
  accelerate::testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    auto got =
        synced_gradient(comm, torch::kFloat, GradientSyncOptions().comm_hook(CommHook::kBf16));
    EXPECT_TRUE(torch::equal(got, rank_gradient(0).to(torch::kFloat)));
  });
}

}  // namespace
