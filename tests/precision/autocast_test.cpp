// AutocastGuard: dtypes inside and after a region, nesting, the cache of
// casted weights, and the dtypes autocast refuses.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <thread>

#include "accelerate/common/errors.h"
#include "accelerate/precision/autocast.h"
#include "precision/cached_linear.h"

namespace {

using accelerate::AutocastGuard;
using accelerate::AutocastOptions;

torch::nn::Linear small_linear() {
  torch::manual_seed(7);
  return torch::nn::Linear(4, 3);
}

TEST(Autocast, LinearRunsInBf16InsideAndFp32After) {
  auto linear = small_linear();
  auto x = torch::randn({2, 4});
  {
    AutocastGuard guard(torch::kCPU, torch::kBFloat16);
    EXPECT_TRUE(accelerate::autocast_enabled(torch::kCPU));
    EXPECT_EQ(accelerate::autocast_dtype(torch::kCPU), torch::kBFloat16);
    auto out = linear->forward(x);
    EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
    // Autocast's fp32 list: losses run in float32 even on bf16 inputs.
    EXPECT_EQ(torch::mse_loss(out, torch::zeros({2, 3})).scalar_type(), torch::kFloat);
    // Parameters keep their dtype; only the computation is lowered.
    EXPECT_EQ(linear->weight.scalar_type(), torch::kFloat);
  }
  EXPECT_FALSE(accelerate::autocast_enabled(torch::kCPU));
  EXPECT_EQ(linear->forward(x).scalar_type(), torch::kFloat);
}

// A post-LayerNorm block (Linear, then LayerNorm) in bf16: LibTorch 1.13's
// kernel refuses the bf16 input with fp32 weights unless autocast computes
// it in fp32 (src/compat/layer_norm_autocast.cpp); 2.x takes it as it is.
TEST(Autocast, LayerNormAfterALinearRunsInBf16) {
  torch::manual_seed(0);
  torch::nn::Linear linear(8, 8);
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({8}));
  auto x = torch::randn({4, 8});
  torch::Tensor h, out;
  {
    AutocastGuard bf16(torch::kCPU, torch::kBFloat16);
    h = linear(x);
    out = norm(h);
  }
  EXPECT_EQ(h.scalar_type(), torch::kBFloat16);
  const auto expected = norm(h.detach().to(torch::kFloat));
  EXPECT_TRUE(torch::allclose(out.to(torch::kFloat), expected, 2e-2, 2e-2));
  out.to(torch::kFloat).pow(2).sum().backward();
  ASSERT_TRUE(linear->weight.grad().defined());
  EXPECT_TRUE(torch::isfinite(linear->weight.grad()).all().item<bool>());
  EXPECT_TRUE(norm->weight.grad().defined());
}

TEST(Autocast, GradientsOfFp32ParametersStayFp32) {
  auto linear = small_linear();
  auto x = torch::randn({2, 4});
  at::Tensor loss;
  {
    AutocastGuard guard(torch::kCPU, torch::kBFloat16);
    loss = linear->forward(x).to(torch::kFloat).sum();
  }
  loss.backward();
  EXPECT_EQ(linear->weight.grad().scalar_type(), torch::kFloat);
  EXPECT_EQ(linear->bias.grad().scalar_type(), torch::kFloat);
}

TEST(Autocast, NestedGuardsRestoreTheOuterState) {
  auto linear = small_linear();
  auto x = torch::randn({2, 4});
  AutocastGuard outer(torch::kCPU, torch::kBFloat16);
  {
    AutocastGuard fp32_island(torch::kCPU, torch::kBFloat16, AutocastOptions().enabled(false));
    EXPECT_FALSE(accelerate::autocast_enabled(torch::kCPU));
    EXPECT_EQ(linear->forward(x).scalar_type(), torch::kFloat);
    {
      AutocastGuard inner(torch::kCPU, torch::kBFloat16);
      EXPECT_EQ(linear->forward(x).scalar_type(), torch::kBFloat16);
    }
    EXPECT_FALSE(accelerate::autocast_enabled(torch::kCPU));
  }
  EXPECT_TRUE(accelerate::autocast_enabled(torch::kCPU));
  EXPECT_EQ(linear->forward(x).scalar_type(), torch::kBFloat16);
}

TEST(Autocast, InactiveGuardChangesNothing) {
  AutocastGuard nothing;
  EXPECT_FALSE(nothing.active());
  EXPECT_FALSE(accelerate::autocast_enabled(torch::kCPU));
}

TEST(Autocast, StateIsPerThread) {
  AutocastGuard guard(torch::kCPU, torch::kBFloat16);
  bool enabled_elsewhere = true;
  std::thread([&] { enabled_elsewhere = accelerate::autocast_enabled(torch::kCPU); }).join();
  EXPECT_FALSE(enabled_elsewhere);
  EXPECT_TRUE(accelerate::autocast_enabled(torch::kCPU));
}

// The cache keeps casts of leaf float32 tensors that require grad, i.e.
// weights as aten::linear sees them (cached_linear.h).
using accelerate::testing::CachedLinear;

// Within one region a weight changed in place is still seen through its
// cached bf16 copy (as in PyTorch); leaving the outermost region drops it.
TEST(Autocast, CacheHoldsCastWeightsUntilTheOutermostExit) {
  torch::manual_seed(3);
  CachedLinear linear;
  auto x = torch::randn({2, 4});
  at::Tensor before, stale, after_inner_exit, fresh;
  {
    AutocastGuard outer(torch::kCPU, torch::kBFloat16);
    before = linear->forward(x);
    {
      torch::NoGradGuard no_grad;
      linear->weight.add_(1.0);
    }
    stale = linear->forward(x);
    { AutocastGuard inner(torch::kCPU, torch::kBFloat16); }
    after_inner_exit = linear->forward(x);
  }
  {
    AutocastGuard again(torch::kCPU, torch::kBFloat16);
    fresh = linear->forward(x);
  }
  EXPECT_TRUE(torch::equal(before, stale));
  EXPECT_TRUE(torch::equal(before, after_inner_exit)) << "an inner exit must not drop the cache";
  EXPECT_FALSE(torch::equal(before, fresh));
}

TEST(Autocast, ClearCacheAndCacheDisabledSeeNewWeights) {
  torch::manual_seed(3);
  CachedLinear linear;
  auto x = torch::randn({2, 4});
  {
    AutocastGuard guard(torch::kCPU, torch::kBFloat16);
    auto before = linear->forward(x);
    {
      torch::NoGradGuard no_grad;
      linear->weight.add_(1.0);
    }
    accelerate::clear_autocast_cache();
    EXPECT_FALSE(torch::equal(before, linear->forward(x)));
  }
  {
    AutocastGuard uncached(torch::kCPU, torch::kBFloat16, AutocastOptions().cache_enabled(false));
    auto before = linear->forward(x);
    {
      torch::NoGradGuard no_grad;
      linear->weight.add_(1.0);
    }
    EXPECT_FALSE(torch::equal(before, linear->forward(x)));
  }
}

// A scope that turns the cache on inside a region without one (the
// Accelerator's region around the loop) drops its copies when it exits:
// nothing else would, the outer region never ends while training runs.
TEST(Autocast, ACachingScopeInsideAnUncachedRegionDropsItsCopiesAtExit) {
  torch::manual_seed(3);
  CachedLinear linear;
  auto x = torch::randn({2, 4});
  AutocastGuard loop(torch::kCPU, torch::kBFloat16, AutocastOptions().cache_enabled(false));
  at::Tensor before, after;
  {
    AutocastGuard scope(torch::kCPU, torch::kBFloat16);
    before = linear->forward(x);
  }
  {
    torch::NoGradGuard no_grad;
    linear->weight.add_(1.0);
  }
  {
    AutocastGuard scope(torch::kCPU, torch::kBFloat16);
    after = linear->forward(x);
  }
  EXPECT_FALSE(torch::equal(before, after)) << "the second scope saw the first one's stale copy";
}

TEST(Autocast, RefusesFp16OnCpuAndOtherDtypes) {
  try {
    AutocastGuard guard(torch::kCPU, torch::kHalf);
    FAIL() << "fp16 autocast on the CPU was accepted";
  } catch (const accelerate::ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("fp16 autocast is not available on the CPU"),
              std::string::npos)
        << error.what();
  }
  EXPECT_THROW(AutocastGuard(torch::kCPU, torch::kFloat), accelerate::ConfigError);
  EXPECT_FALSE(accelerate::autocast_enabled(torch::kCPU)) << "a refused guard left state behind";
  EXPECT_EQ(accelerate::mixed_precision_dtype(accelerate::MixedPrecision::kBF16), torch::kBFloat16);
  EXPECT_EQ(accelerate::mixed_precision_dtype(accelerate::MixedPrecision::kFP16), torch::kHalf);
  EXPECT_THROW(accelerate::mixed_precision_dtype(accelerate::MixedPrecision::kNo),
               accelerate::ConfigError);
}

}  // namespace
