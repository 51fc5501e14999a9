// GradScaler on CPU (the portable path): scaling, unscaling, skipping steps
// with inf/NaN gradients, backoff, growth after the interval, call-order
// errors, and a state round-trip.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "accelerate/common/errors.h"
#include "accelerate/precision/grad_scaler.h"

namespace {

using accelerate::GradScaler;
using accelerate::GradScalerOptions;

// One parameter [1, 2] trained with SGD(lr 1): a step subtracts the gradient.
struct Problem {
  torch::Tensor weight = torch::tensor({1.0f, 2.0f}).requires_grad_(true);
  torch::optim::SGD optimizer{std::vector<torch::Tensor>{weight}, torch::optim::SGDOptions(1.0)};

  // Backward of scaler.scale(sum(weight * coefficients)): the true gradient
  // is `coefficients`.
  void backward(GradScaler& scaler, std::vector<float> coefficients) {
    optimizer.zero_grad();
    scaler.scale((weight * torch::tensor(coefficients)).sum()).backward();
  }
};

TEST(GradScaler, DefaultsAreAccelerates) {
  GradScalerOptions options;
  EXPECT_EQ(options.init_scale(), 65536.0);
  EXPECT_EQ(options.growth_factor(), 2.0);
  EXPECT_EQ(options.backoff_factor(), 0.5);
  EXPECT_EQ(options.growth_interval(), 2000);
  EXPECT_TRUE(options.enabled());
  GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.scale(torch::tensor(3.0f)).item<float>(), 3.0f * 65536.0f);
}

TEST(GradScaler, UnscalesBeforeTheStep) {
  GradScaler scaler;
  Problem p;
  p.backward(scaler, {0.25f, -0.5f});
  EXPECT_EQ(p.weight.grad()[0].item<float>(), 0.25f * 65536.0f) << "backward saw the scaled loss";
  scaler.unscale_(p.optimizer);
  EXPECT_TRUE(scaler.is_unscaled(p.optimizer));
  EXPECT_TRUE(torch::equal(p.weight.grad(), torch::tensor({0.25f, -0.5f})));
  EXPECT_TRUE(scaler.step(p.optimizer)) << "step() must not unscale a second time";
  scaler.update();
  EXPECT_TRUE(torch::equal(p.weight.detach(), torch::tensor({0.75f, 2.5f})));
}

TEST(GradScaler, SkipsInfAndNanStepsAndBacksOff) {
  GradScaler scaler;
  Problem p;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {inf, nan}) {
    const double scale_before = scaler.get_scale();
    p.backward(scaler, {bad, 1.0f});
    EXPECT_FALSE(scaler.step(p.optimizer)) << "a step with " << bad << " was taken";
    scaler.update();
    EXPECT_TRUE(torch::equal(p.weight.detach(), torch::tensor({1.0f, 2.0f})));
    EXPECT_EQ(scaler.get_scale(), scale_before * 0.5);
    EXPECT_EQ(scaler.growth_tracker(), 0);
  }
  p.backward(scaler, {1.0f, 1.0f});
  EXPECT_TRUE(scaler.step(p.optimizer));
  scaler.update();
  EXPECT_TRUE(torch::equal(p.weight.detach(), torch::tensor({0.0f, 1.0f})));
}

TEST(GradScaler, GrowsAfterTheIntervalOfCleanSteps) {
  GradScaler scaler(GradScalerOptions().init_scale(8.0).growth_interval(3).growth_factor(4.0));
  Problem p;
  const std::vector<double> expected_scales = {8, 8, 32, 32, 32, 128};
  const std::vector<int64_t> expected_trackers = {1, 2, 0, 1, 2, 0};
  for (size_t step = 0; step < expected_scales.size(); ++step) {
    p.backward(scaler, {0.0f, 0.0f});
    ASSERT_TRUE(scaler.step(p.optimizer));
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), expected_scales[step]) << "after step " << step;
    EXPECT_EQ(scaler.growth_tracker(), expected_trackers[step]) << "after step " << step;
  }
  // An overflow resets the count toward growth.
  p.backward(scaler, {std::numeric_limits<float>::infinity(), 0.0f});
  EXPECT_FALSE(scaler.step(p.optimizer));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 64.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(GradScaler, DoesNotGrowPastFloatRange) {
  GradScaler scaler(GradScalerOptions().init_scale(3e38).growth_interval(1));
  Problem p;
  p.backward(scaler, {0.0f, 0.0f});
  scaler.step(p.optimizer);
  scaler.update();
  EXPECT_FLOAT_EQ(static_cast<float>(scaler.get_scale()), 3e38f);
}

TEST(GradScaler, RejectsCallsOutOfOrder) {
  GradScaler scaler;
  Problem p;
  EXPECT_THROW(scaler.update(), accelerate::Error) << "update() with nothing recorded";
  p.optimizer.zero_grad();
  (p.weight.sum()).backward();
  EXPECT_THROW(scaler.unscale_(p.optimizer), accelerate::Error) << "unscale_ before any scale()";
  p.backward(scaler, {1.0f, 1.0f});
  scaler.unscale_(p.optimizer);
  EXPECT_THROW(scaler.unscale_(p.optimizer), accelerate::Error);
  scaler.step(p.optimizer);
  EXPECT_THROW(scaler.step(p.optimizer), accelerate::Error);
  EXPECT_THROW(scaler.unscale_(p.optimizer), accelerate::Error);
  scaler.update();
  p.backward(scaler, {1.0f, 1.0f});
  EXPECT_NO_THROW(scaler.unscale_(p.optimizer)) << "update() starts a new step";
}

TEST(GradScaler, RefusesFp16GradientsAndBadOptions) {
  GradScaler scaler;
  auto weight = torch::ones({2}, torch::kHalf).requires_grad_(true);
  torch::optim::SGD optimizer(std::vector<torch::Tensor>{weight}, torch::optim::SGDOptions(1.0));
  scaler.scale(torch::tensor(1.0f));
  weight.mutable_grad() = torch::ones({2}, torch::kHalf);
  EXPECT_THROW(scaler.unscale_(optimizer), accelerate::Error);
  EXPECT_THROW(GradScaler(GradScalerOptions().growth_factor(0.5)), accelerate::ConfigError);
  EXPECT_THROW(GradScaler(GradScalerOptions().backoff_factor(1.5)), accelerate::ConfigError);
  EXPECT_THROW(GradScaler(GradScalerOptions().growth_interval(0)), accelerate::ConfigError);
}

TEST(GradScaler, DisabledPassesThrough) {
  GradScaler scaler(GradScalerOptions().enabled(false));
  Problem p;
  EXPECT_EQ(scaler.get_scale(), 1.0);
  p.backward(scaler, {std::numeric_limits<float>::infinity(), 1.0f});
  EXPECT_TRUE(scaler.step(p.optimizer)) << "a disabled scaler never skips";
  EXPECT_NO_THROW(scaler.update());
}

TEST(GradScaler, StateRoundTrips) {
  GradScaler original(GradScalerOptions().init_scale(1024).growth_interval(5).backoff_factor(0.25));
  Problem p;
  for (int i = 0; i < 3; ++i) {
    p.backward(original, {1.0f, 1.0f});
    original.step(p.optimizer);
    original.update();
  }
  p.backward(original, {std::numeric_limits<float>::infinity(), 1.0f});
  original.step(p.optimizer);
  original.update();
  p.backward(original, {1.0f, 1.0f});
  original.step(p.optimizer);
  original.update();
  ASSERT_EQ(original.get_scale(), 256.0);
  ASSERT_EQ(original.growth_tracker(), 1);

  std::stringstream bytes;
  {
    torch::serialize::OutputArchive archive;
    original.save(archive);
    archive.save_to(bytes);
  }
  GradScaler restored;  // different defaults: everything comes from the state
  torch::serialize::InputArchive archive;
  archive.load_from(bytes);
  restored.load(archive);
  EXPECT_EQ(restored.get_scale(), 256.0);
  EXPECT_EQ(restored.growth_tracker(), 1);
  EXPECT_EQ(restored.options().growth_interval(), 5);
  EXPECT_EQ(restored.options().backoff_factor(), 0.25);
  // Both continue identically: 4 more clean steps reach the interval.
  for (GradScaler* scaler : {&original, &restored}) {
    Problem q;
    for (int i = 0; i < 4; ++i) {
      q.backward(*scaler, {1.0f, 1.0f});
      scaler->step(q.optimizer);
      scaler->update();
    }
  }
  EXPECT_EQ(original.get_scale(), 512.0);
  EXPECT_EQ(restored.get_scale(), 512.0);
}

TEST(GradScaler, LoadingADisabledScalersStateFails) {
  GradScaler disabled(GradScalerOptions().enabled(false));
  std::stringstream bytes;
  {
    torch::serialize::OutputArchive archive;
    disabled.save(archive);
    archive.save_to(bytes);
  }
  GradScaler enabled;
  torch::serialize::InputArchive archive;
  archive.load_from(bytes);
  EXPECT_THROW(enabled.load(archive), accelerate::Error);
}

}  // namespace
