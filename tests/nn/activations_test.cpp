// accelerate::gelu: the fused tanh-GELU kernel against LibTorch's at::gelu
// (forward and backward, float and bfloat16, sizes that leave remainders
// in the vector loops, extreme values, NaN, non-contiguous input), and the
// paths that stay at::gelu.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "accelerate/nn/activations.h"

namespace {

using accelerate::GeluApproximation;

// Inputs over GELU's whole shape: the bend near 0, the tails where tanh
// saturates, and magnitudes where x^3 dominates.
torch::Tensor gelu_inputs(int64_t n, torch::ScalarType dtype) {
  torch::manual_seed(0);
  auto x = torch::randn({n}) * 4;
  auto edges = torch::tensor({0.0f, -0.0f, 1e-30f, -1e-30f, -0.75f, 5.0f, -5.0f, 9.0f, -9.0f, 50.0f,
                              -50.0f, 1e4f, -1e4f, 3e13f, -3e13f});
  return torch::cat({edges, x}).to(dtype);
}

// Value and input gradient of f at x for the upstream gradient g.
std::pair<torch::Tensor, torch::Tensor> value_and_grad(
    const std::function<torch::Tensor(const torch::Tensor&)>& f, const torch::Tensor& x,
    const torch::Tensor& g) {
  auto leaf = x.detach().requires_grad_();
  auto y = f(leaf);
  auto dx = torch::autograd::grad({y}, {leaf}, {g})[0];
  return {y.detach(), dx};
}

torch::Tensor libtorch_tanh_gelu(const torch::Tensor& x) { return torch::gelu(x, "tanh"); }
torch::Tensor fused_tanh_gelu(const torch::Tensor& x) {
  return accelerate::gelu(x, GeluApproximation::kTanh);
}

TEST(FusedGelu, FloatMatchesLibTorchForwardAndBackward) {
  for (int64_t n : {1, 7, 16, 1000, 70001}) {  // 70001: several parallel tasks and a remainder
    auto x = gelu_inputs(n, torch::kFloat);
    auto g = torch::randn_like(x);
    auto [y, dx] = value_and_grad(fused_tanh_gelu, x, g);
    auto [y_ref, dx_ref] = value_and_grad(libtorch_tanh_gelu, x, g);
    // Different but equally accurate float formulas: a few ulps of the
    // larger of the value and 1 (LibTorch's 1 + tanh cancels for x < 0).
    EXPECT_TRUE(torch::allclose(y, y_ref, 1e-6, 2e-6))
        << "n=" << n << " max diff " << (y - y_ref).abs().max().item<float>();
    EXPECT_TRUE(torch::allclose(dx, dx_ref, 1e-5, 1e-5))
        << "n=" << n << " max diff " << (dx - dx_ref).abs().max().item<float>();
  }
}

// The tanh GELU and its derivative in double, in the sigmoid form that
// keeps the negative tail's relative accuracy (1 + tanh u cancels there).
std::pair<torch::Tensor, torch::Tensor> exact_tanh_gelu(const torch::Tensor& x_in,
                                                        const torch::Tensor& g_in) {
  const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
  auto x = x_in.to(torch::kDouble), g = g_in.to(torch::kDouble);
  auto s = torch::sigmoid(2 * k * (x + c * x.pow(3)));  // (1 + tanh u) / 2
  auto y = x * s;
  auto dx = g * (s + 2 * x * s * (1 - s) * k * (1 + 3 * c * x.pow(2)));
  return {y, dx};
}

TEST(FusedGelu, BFloat16IsTheExactResultRoundedToNearest) {
  // Computed in float and rounded once to nearest even. (LibTorch 1.13's
  // own bfloat16 kernel rounds its intermediates to bfloat16: 1.3906 for
  // gelu(1.5), where 1.3996 rounds to 1.3984; its float kernel gives 0
  // for x < -5, where the value is tiny but a normal bfloat16.)
  auto x = gelu_inputs(50000, torch::kBFloat16);
  auto g = torch::randn_like(x);
  auto [y, dx] = value_and_grad(fused_tanh_gelu, x, g);
  auto [y_exact, dx_exact] = exact_tanh_gelu(x, g);
  ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
  ASSERT_EQ(dx.scalar_type(), torch::kBFloat16);
  // A float result within a few ulps of the exact one rounds to the same
  // bfloat16 except where the two straddle a rounding boundary (or the
  // exact value is subnormal).
  EXPECT_LT(y.ne(y_exact.to(torch::kBFloat16)).sum().item<int64_t>(), x.numel() / 200);
  EXPECT_LT(dx.ne(dx_exact.to(torch::kBFloat16)).sum().item<int64_t>(), x.numel() / 200);
  // Below FLT_MIN the kernel flushes to 0 (exp underflows there).
  EXPECT_TRUE(torch::allclose(y.to(torch::kDouble), y_exact, 1.0 / 256, 1e-36));
  EXPECT_TRUE(torch::allclose(dx.to(torch::kDouble), dx_exact, 1.0 / 256, 1e-6));
}

TEST(FusedGelu, NaNStaysNaNAndInfinityStaysInfinity) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    auto x = torch::tensor({nan, inf, 1.0f}).to(dtype);
    auto y = accelerate::gelu(x, GeluApproximation::kTanh).to(torch::kFloat);
    EXPECT_TRUE(std::isnan(y[0].item<float>()));
    EXPECT_EQ(y[1].item<float>(), inf);
    auto dx = value_and_grad(fused_tanh_gelu, x, torch::ones_like(x)).second.to(torch::kFloat);
    EXPECT_TRUE(std::isnan(dx[0].item<float>()));
  }
}

TEST(FusedGelu, NonContiguousInputGivesTheContiguousResult) {
  torch::manual_seed(1);
  auto x = torch::randn({64, 48});
  auto g = torch::randn({48, 64});
  auto [y, dx] = value_and_grad(fused_tanh_gelu, x.t(), g);
  auto [y_ref, dx_ref] = value_and_grad(libtorch_tanh_gelu, x.t(), g);
  EXPECT_EQ(y.sizes(), y_ref.sizes());
  EXPECT_TRUE(torch::allclose(y, y_ref, 1e-6, 2e-6));
  EXPECT_TRUE(torch::allclose(dx, dx_ref, 1e-5, 1e-5));
}

TEST(FusedGelu, OtherDtypesAndTheExactGeluAreLibTorchs) {
  torch::manual_seed(2);
  auto x = torch::randn({333}, torch::kDouble);
  EXPECT_TRUE(torch::equal(accelerate::gelu(x, GeluApproximation::kTanh), torch::gelu(x, "tanh")));
  auto f = torch::randn({333});
  EXPECT_TRUE(torch::equal(accelerate::gelu(f), torch::gelu(f)));
  EXPECT_TRUE(torch::equal(accelerate::gelu(f, GeluApproximation::kNone), torch::gelu(f)));
}

}  // namespace
