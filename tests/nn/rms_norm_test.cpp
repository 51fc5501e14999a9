// accelerate::rms_norm and accelerate::silu_mul (Llama's norm and gated MLP
// activation): the fused CPU kernels against the LibTorch composites that
// transformers' modules compute (forward, the gradients of every input,
// float and bfloat16, widths that leave remainders in the vector loops,
// several parallel tasks, NaN), the paths that stay composite, and the
// one-line error for a weight of the wrong shape.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/nn/activations.h"
#include "accelerate/nn/rms_norm.h"

namespace {

// transformers' LlamaRMSNorm.forward.
torch::Tensor composite_rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  const auto x32 = x.to(torch::kFloat);
  const auto variance = x32.pow(2).mean(-1, /*keepdim=*/true);
  return w * (x32 * torch::rsqrt(variance + eps)).to(x.scalar_type());
}

// Outputs and gradients of f(a, b) for the upstream gradient g.
std::vector<torch::Tensor> value_and_grads(
    const std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>& f,
    const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& g) {
  auto la = a.detach().requires_grad_(), lb = b.detach().requires_grad_();
  auto y = f(la, lb);
  auto grads = torch::autograd::grad({y}, {la, lb}, {g});
  return {y.detach(), grads[0], grads[1]};
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

double max_abs(const torch::Tensor& a) { return a.to(torch::kDouble).abs().max().item<double>(); }

TEST(FusedRmsNorm, FloatMatchesTheCompositeForwardAndBackward) {
  const double eps = 1e-6;
  // 7 and 33: vector-loop remainders; 512 x 1024 rows: several parallel tasks.
  for (const auto& shape : std::vector<std::vector<int64_t>>{{3, 7}, {2, 5, 33}, {1024, 512}}) {
    torch::manual_seed(1);
    const auto x = torch::randn(shape) * 3;
    const auto w = 1 + 0.3 * torch::randn({shape.back()});
    const auto g = torch::randn(shape);
    const auto fused = [&](const torch::Tensor& a, const torch::Tensor& b) {
      return accelerate::rms_norm(a, b, eps);
    };
    const auto composite = [&](const torch::Tensor& a, const torch::Tensor& b) {
      return composite_rms_norm(a, b, eps);
    };
    const auto ours = value_and_grads(fused, x, w, g);
    const auto theirs = value_and_grads(composite, x, w, g);
    const std::string what = c10::str(torch::IntArrayRef(shape));
    EXPECT_LE(max_diff(ours[0], theirs[0]), 1e-6 * max_abs(theirs[0])) << what;
    EXPECT_LE(max_diff(ours[1], theirs[1]), 1e-5 * max_abs(theirs[1])) << what;
    // The weight's gradient sums over every row: float rounding grows with them.
    EXPECT_LE(max_diff(ours[2], theirs[2]), 1e-5 * max_abs(theirs[2])) << what;
  }
}

TEST(FusedRmsNorm, BFloat16MatchesTheCompositeToItsRounding) {
  torch::manual_seed(2);
  const auto x = (torch::randn({64, 96}) * 3).to(torch::kBFloat16);
  const auto w = (1 + 0.3 * torch::randn({96})).to(torch::kBFloat16);
  const auto g = torch::randn({64, 96}).to(torch::kBFloat16);
  const auto ours =
      value_and_grads([](const torch::Tensor& a,
                         const torch::Tensor& b) { return accelerate::rms_norm(a, b, 1e-5); },
                      x, w, g);
  const auto theirs = value_and_grads(
      [](const torch::Tensor& a, const torch::Tensor& b) { return composite_rms_norm(a, b, 1e-5); },
      x, w, g);
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_EQ(ours[i].scalar_type(), torch::kBFloat16) << i;
    // A couple of bfloat16 ulps (2^-8 relative) of the largest value.
    EXPECT_LE(max_diff(ours[i], theirs[i]), 2e-2 * max_abs(theirs[i])) << i;
  }
  // The forward rounds where the composite rounds: equal for most elements.
  EXPECT_GT(ours[0].eq(theirs[0]).to(torch::kDouble).mean().item<double>(), 0.95);
}

TEST(FusedRmsNorm, ANaNPoisonsOnlyItsRowAndOtherCasesStayComposite) {
  auto x = torch::randn({3, 8});
  x[1][2] = std::numeric_limits<float>::quiet_NaN();
  const auto y = accelerate::rms_norm(x, torch::ones({8}), 1e-6);
  EXPECT_TRUE(y[1].isnan().all().item<bool>());
  EXPECT_FALSE(y[0].isnan().any().item<bool>() || y[2].isnan().any().item<bool>());
  // Double, and a weight of another dtype: the composite, exactly.
  const auto xd = torch::randn({4, 8}, torch::kDouble), wd = torch::rand({8}, torch::kDouble);
  EXPECT_TRUE(torch::equal(accelerate::rms_norm(xd, wd, 1e-6), composite_rms_norm(xd, wd, 1e-6)));
  const auto xb = xd.to(torch::kBFloat16), wf = wd.to(torch::kFloat);
  EXPECT_TRUE(torch::equal(accelerate::rms_norm(xb, wf, 1e-6), composite_rms_norm(xb, wf, 1e-6)));
  try {
    accelerate::rms_norm(torch::randn({2, 8}), torch::ones({7}), 1e-6);
    FAIL() << "a [7] weight for width 8 was taken";
  } catch (const accelerate::Error& e) {
    EXPECT_EQ(std::string(e.what()), "rms_norm: weight must be [8] for x of shape [2, 8], got [7]");
  }
}

torch::Tensor composite_silu_mul(const torch::Tensor& a, const torch::Tensor& b) {
  return torch::silu(a) * b;
}

TEST(FusedSiluMul, MatchesTheCompositeForwardAndBackward) {
  for (const int64_t n : {1, 7, 33, 70001}) {  // 70001: several parallel tasks and a remainder
    torch::manual_seed(3);
    auto a = torch::randn({n}) * 4;
    a.slice(0, 0, std::min<int64_t>(n, 4))
        .copy_(torch::tensor({0.0f, -90.0f, 90.0f, -1e-30f}).slice(0, 0, std::min<int64_t>(n, 4)));
    const auto b = torch::randn({n}), g = torch::randn({n});
    const auto ours = value_and_grads(
        [](const torch::Tensor& x, const torch::Tensor& y) { return accelerate::silu_mul(x, y); },
        a, b, g);
    const auto theirs = value_and_grads(composite_silu_mul, a, b, g);
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_TRUE(torch::allclose(ours[i], theirs[i], 1e-5, 1e-6))
          << "n=" << n << " output " << i << " max diff " << max_diff(ours[i], theirs[i]);
    }
  }
  // bfloat16: the exact silu rounded, times b, rounded (LibTorch 1.13's
  // bfloat16 silu also rounds inside 1 + exp(-x), so it is only near).
  const auto a = (torch::randn({4096}) * 3).to(torch::kBFloat16);
  const auto b = torch::randn({4096}).to(torch::kBFloat16);
  const auto y = accelerate::silu_mul(a, b);
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  const auto a64 = a.to(torch::kDouble);
  const auto exact =
      ((a64 * torch::sigmoid(a64)).to(torch::kBFloat16).to(torch::kDouble) * b.to(torch::kDouble))
          .to(torch::kBFloat16);
  EXPECT_GT(y.eq(exact).to(torch::kDouble).mean().item<double>(), 0.99);
  EXPECT_LE(max_diff(y, composite_silu_mul(a, b)), 2e-2 * max_abs(y));
  // Broadcasting shapes and double stay composite, exactly.
  const auto row = torch::randn({1, 5}), block = torch::randn({3, 5});
  EXPECT_TRUE(torch::equal(accelerate::silu_mul(block, row), composite_silu_mul(block, row)));
  const auto ad = torch::randn({9}, torch::kDouble), bd = torch::randn({9}, torch::kDouble);
  EXPECT_TRUE(torch::equal(accelerate::silu_mul(ad, bd), composite_silu_mul(ad, bd)));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(
      accelerate::silu_mul(torch::tensor({nan}), torch::tensor({1.0f})).isnan().all().item<bool>());
}

}  // namespace
