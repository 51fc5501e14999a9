// accelerate::cross_entropy: the fused kernel against LibTorch's
// cross_entropy on float logits (values and gradients, float and bfloat16
// logits, each reduction, ignore_index, class counts that leave vector
// remainders, enough rows for several parallel tasks), NaN, and its errors.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "accelerate/common/errors.h"
#include "accelerate/nn/cross_entropy.h"

namespace {

using accelerate::CrossEntropyOptions;
using accelerate::LossReduction;
namespace F = torch::nn::functional;

F::CrossEntropyFuncOptions::reduction_t libtorch_reduction(LossReduction r) {
  if (r == LossReduction::kSum) return torch::kSum;
  if (r == LossReduction::kNone) return torch::kNone;
  return torch::kMean;
}

struct LossAndGrad {
  torch::Tensor loss, grad;
};

// The loss and d(sum of loss * weights)/d logits, for the fused kernel or
// LibTorch's cross_entropy on the logits in float.
LossAndGrad run(const torch::Tensor& logits, const torch::Tensor& targets,
                CrossEntropyOptions options, bool fused) {
  auto leaf = logits.detach().requires_grad_();
  torch::Tensor loss =
      fused ? accelerate::cross_entropy(leaf, targets, options)
            : F::cross_entropy(leaf.to(torch::kFloat), targets,
                               F::CrossEntropyFuncOptions()
                                   .ignore_index(options.ignore_index())
                                   .reduction(libtorch_reduction(options.reduction())));
  auto weights = torch::linspace(0.5, 1.5, loss.numel()).reshape(loss.sizes());
  auto grad = torch::autograd::grad({loss}, {leaf}, {weights})[0];
  return {loss.detach(), grad};
}

TEST(FusedCrossEntropy, MatchesLibTorchForEveryReductionAndClassCount) {
  torch::manual_seed(0);
  for (int64_t classes : {1, 15, 16, 17, 100, 8192}) {
    const int64_t rows = classes == 8192 ? 37 : 300;  // several parallel tasks either way
    auto logits = torch::randn({rows, classes}) * 3;
    auto targets = torch::randint(0, classes, {rows});
    targets.index_put_({torch::arange(0, rows, 5)}, -100);
    for (auto reduction : {LossReduction::kMean, LossReduction::kSum, LossReduction::kNone}) {
      const auto options = CrossEntropyOptions().reduction(reduction);
      auto fused = run(logits, targets, options, true);
      auto ref = run(logits, targets, options, false);
      ASSERT_EQ(fused.loss.sizes(), ref.loss.sizes());
      EXPECT_EQ(fused.loss.scalar_type(), torch::kFloat);
      EXPECT_TRUE(torch::allclose(fused.loss, ref.loss, 1e-5, 1e-5))
          << "classes " << classes << ": " << fused.loss.sum().item<double>() << " vs "
          << ref.loss.sum().item<double>();
      EXPECT_TRUE(torch::allclose(fused.grad, ref.grad, 1e-5, 1e-6))
          << "classes " << classes << " max diff " << (fused.grad - ref.grad).abs().max();
    }
  }
}

TEST(FusedCrossEntropy, BFloat16LogitsGiveTheFloatLossAndABFloat16Gradient) {
  torch::manual_seed(1);
  auto logits = (torch::randn({64, 1000}) * 4).to(torch::kBFloat16);
  auto targets = torch::randint(0, 1000, {64});
  auto fused = run(logits, targets, {}, true);
  auto ref = run(logits, targets, {}, false);  // LibTorch on the same values in float
  EXPECT_EQ(fused.loss.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::allclose(fused.loss, ref.loss, 1e-5, 1e-5));
  ASSERT_EQ(fused.grad.scalar_type(), torch::kBFloat16);
  // ref.grad is the float gradient rounded to bfloat16 by the cast's backward.
  EXPECT_TRUE(
      torch::allclose(fused.grad.to(torch::kFloat), ref.grad.to(torch::kFloat), 1.0 / 128, 1e-9));
}

TEST(FusedCrossEntropy, AllRowsIgnoredGiveNaNMeanAndZeroGradient) {
  auto logits = torch::randn({4, 10});
  auto targets = torch::full({4}, 7, torch::kLong);
  auto fused = run(logits, targets, CrossEntropyOptions().ignore_index(7), true);
  auto ref = run(logits, targets, CrossEntropyOptions().ignore_index(7), false);
  EXPECT_TRUE(std::isnan(fused.loss.item<float>()));
  EXPECT_TRUE(std::isnan(ref.loss.item<float>()));
  EXPECT_EQ(fused.grad.abs().sum().item<float>(), 0.0f);
}

TEST(FusedCrossEntropy, NaNOrInfiniteLogitsGiveNaNForTheirRowOnly) {
  auto logits = torch::randn({3, 40});
  logits[0][5] = std::numeric_limits<float>::quiet_NaN();
  logits[1][9] = std::numeric_limits<float>::infinity();
  auto targets = torch::tensor({1, 2, 3});
  auto fused = run(logits, targets, CrossEntropyOptions().reduction(LossReduction::kNone), true);
  auto ref = run(logits, targets, CrossEntropyOptions().reduction(LossReduction::kNone), false);
  EXPECT_TRUE(std::isnan(fused.loss[0].item<float>()));
  EXPECT_TRUE(std::isnan(fused.loss[1].item<float>()));
  EXPECT_TRUE(std::isnan(ref.loss[1].item<float>()));
  EXPECT_NEAR(fused.loss[2].item<float>(), ref.loss[2].item<float>(), 1e-5);
}

TEST(FusedCrossEntropy, BadInputsAreErrorsNamingTheProblem) {
  auto logits = torch::randn({4, 10});
  auto expect_error = [](const std::function<void()>& f, const std::string& words) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one mentioning " << words;
    } catch (const accelerate::Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_error(
      [&] {
        accelerate::cross_entropy(logits, torch::tensor({0, 1, 10, 2}));
      },
      "target 10 is outside [0, 10)");
  expect_error(
      [&] {
        accelerate::cross_entropy(logits, torch::tensor({0, -1, 3, 2}));
      },
      "target -1 is outside");
  expect_error([&] { accelerate::cross_entropy(logits, torch::zeros({4})); },
               "integer class targets");
  expect_error(
      [&] {
        accelerate::cross_entropy(logits.reshape({2, 2, 10}), torch::zeros({2, 2}));
      },
      "logits [rows, classes]");
  expect_error([&] { accelerate::cross_entropy(logits, torch::zeros({3}, torch::kLong)); },
               "targets [rows]");
}

TEST(FusedCrossEntropy, DoubleLogitsUseLibTorch) {
  torch::manual_seed(3);
  auto logits = torch::randn({8, 12}, torch::kDouble);
  auto targets = torch::randint(0, 12, {8});
  auto loss = accelerate::cross_entropy(logits, targets);
  EXPECT_EQ(loss.scalar_type(), torch::kDouble);
  EXPECT_TRUE(torch::equal(loss, F::cross_entropy(logits, targets)));
}

}  // namespace
