// Optimizer/Scheduler wrappers' stepping semantics, set_seed and
// find_executable_batch_size, without any process group.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include "accelerate/accelerator/memory.h"
#include "accelerate/accelerator/optimizer.h"
#include "accelerate/accelerator/random.h"
#include "accelerate/accelerator/scheduler.h"
#include "accelerate/common/errors.h"

namespace {

using SGD = accelerate::Optimizer<torch::optim::SGD>;

struct Fixture {
  torch::Tensor weight = torch::ones({2}, torch::requires_grad());
  void make_grad() { (weight * weight).sum().backward(); }  // grad = 2
};

TEST(OptimizerWrapper, UnpreparedBehavesLikeItsBase) {
  Fixture f;
  SGD optimizer({f.weight}, torch::optim::SGDOptions(0.5));
  f.make_grad();
  optimizer.step();
  EXPECT_TRUE(torch::allclose(f.weight, torch::zeros({2})));  // 1 - 0.5 * 2
  optimizer.zero_grad();
  EXPECT_FALSE(f.weight.grad().defined() && f.weight.grad().abs().sum().item<float>() != 0);
}

TEST(OptimizerWrapper, SkipsStepAndZeroGradOffSyncSteps) {
  Fixture f;
  SGD optimizer({f.weight}, torch::optim::SGDOptions(0.5));
  auto state = std::make_shared<accelerate::GradientState>();
  optimizer.attach(state);
  f.make_grad();
  state->set_sync_gradients(false);
  optimizer.step();
  optimizer.zero_grad();
  EXPECT_TRUE(torch::equal(f.weight, torch::ones({2})));
  EXPECT_TRUE(torch::equal(f.weight.grad(), torch::full({2}, 2.0f)));  // kept for accumulation
  EXPECT_TRUE(state->optimizer_step_was_skipped());
  EXPECT_EQ(state->optimizer_steps(), 0);
  state->set_sync_gradients(true);
  optimizer.step();
  EXPECT_TRUE(torch::allclose(f.weight, torch::zeros({2})));
  EXPECT_FALSE(state->optimizer_step_was_skipped());
  EXPECT_EQ(state->optimizer_steps(), 1);
}

TEST(SchedulerWrapper, AdvancesOnlyWithRealOptimizerSteps) {
  Fixture f;
  SGD optimizer({f.weight}, torch::optim::SGDOptions(1.0));
  accelerate::Scheduler<torch::optim::StepLR> scheduler(optimizer, /*step_size=*/1, /*gamma=*/0.5);
  // The same schedule stepped by hand, for LibTorch's own StepLR counting.
  Fixture g;
  torch::optim::SGD reference_optimizer({g.weight}, torch::optim::SGDOptions(1.0));
  torch::optim::StepLR reference(reference_optimizer, 1, 0.5);
  auto lr = [](torch::optim::Optimizer& o) { return o.param_groups()[0].options().get_lr(); };

  auto state = std::make_shared<accelerate::GradientState>();
  optimizer.attach(state);
  scheduler.attach(state);
  for (int micro_step = 1; micro_step <= 6; ++micro_step) {
    state->set_sync_gradients(micro_step % 3 == 0);  // accumulate 3 micro-batches
    optimizer.step();
    scheduler.step();
    if (micro_step % 3 == 0) reference.step();
    EXPECT_DOUBLE_EQ(lr(optimizer), lr(reference_optimizer)) << "micro-step " << micro_step;
  }
  EXPECT_EQ(scheduler.steps_taken(), 2);
  EXPECT_LT(lr(optimizer), 1.0);
  // adjust_scheduler = false: every call advances.
  state->set_adjust_scheduler(false);
  state->set_sync_gradients(false);
  scheduler.step();
  reference.step();
  EXPECT_DOUBLE_EQ(lr(optimizer), lr(reference_optimizer));
  EXPECT_EQ(scheduler.steps_taken(), 3);
}

TEST(SetSeed, SameSeedSameStreamAndDeviceSpecificDiffers) {
  accelerate::set_seed(42);
  auto a = torch::randn({4});
  accelerate::set_seed(42);
  auto b = torch::randn({4});
  EXPECT_TRUE(torch::equal(a, b));
  accelerate::set_seed(42, /*device_specific=*/true, /*process_index=*/1);
  auto c = torch::randn({4});
  accelerate::set_seed(43);
  EXPECT_TRUE(torch::equal(c, torch::randn({4})));
  EXPECT_FALSE(torch::equal(a, c));
}

TEST(FindExecutableBatchSize, ShrinksByTenPercentUntilItFits) {
  std::vector<int64_t> tried;
  auto result = accelerate::find_executable_batch_size(
      [&](int64_t batch_size) {
        tried.push_back(batch_size);
        // The type LibTorch's allocators throw (same macro on 1.13 and 2.x).
        TORCH_CHECK_WITH(OutOfMemoryError, batch_size <= 50,
                         "CUDA out of memory. Tried to allocate 2 GiB");
        return batch_size * 2;
      },
      128);
  EXPECT_EQ(tried, (std::vector<int64_t>{128, 115, 103, 92, 82, 73, 65, 58, 52, 46}));
  EXPECT_EQ(result, 92);
}

TEST(FindExecutableBatchSize, ReachingZeroIsAnErrorAndOtherErrorsPassThrough) {
  auto always_oom = [](int64_t) -> int {
    throw std::runtime_error("DefaultCPUAllocator: can't allocate memory: you tried to allocate");
  };
  try {
    accelerate::find_executable_batch_size(always_oom, 8);
    FAIL() << "expected an error";
  } catch (const accelerate::Error& error) {
    EXPECT_STREQ(error.what(), "No executable batch size found, reached zero.");
  }
  int calls = 0;
  auto broken = [&](int64_t) -> int {
    ++calls;
    throw std::logic_error("bug");
  };
  EXPECT_THROW(accelerate::find_executable_batch_size(broken, 8), std::logic_error);
  EXPECT_EQ(calls, 1);
}

}  // namespace
