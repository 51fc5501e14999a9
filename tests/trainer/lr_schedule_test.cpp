// Hugging Face's learning-rate schedules (accelerate/lr_schedule.h): the
// factors at chosen steps, worked out by hand from transformers'
// definitions, and the rates a WarmupSchedule sets on a real optimizer.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include "accelerate/errors.h"
#include "accelerate/lr_schedule.h"

namespace {

using accelerate::schedule_factor;
using accelerate::SchedulerType;

TEST(LrSchedule, LinearWarmsUpThenDecaysToZero) {
  EXPECT_DOUBLE_EQ(schedule_factor(SchedulerType::kLinear, 0, 10, 100), 0.0);
  EXPECT_DOUBLE_EQ(schedule_factor(SchedulerType::kLinear, 5, 10, 100), 0.5);
  EXPECT_DOUBLE_EQ(schedule_factor(SchedulerType::kLinear, 10, 10, 100), 1.0);
  EXPECT_DOUBLE_EQ(schedule_factor(SchedulerType::kLinear, 55, 10, 100), 0.5);
  EXPECT_DOUBLE_EQ(schedule_factor(SchedulerType::kLinear, 100, 10, 100), 0.0);
  EXPECT_DOUBLE_EQ(schedule_factor(SchedulerType::kLinear, 150, 10, 100), 0.0);
  EXPECT_DOUBLE_EQ(schedule_factor(SchedulerType::kLinear, 0, 0, 100), 1.0);
}

TEST(LrSchedule, CosineFollowsHalfACosine) {
  EXPECT_DOUBLE_EQ(schedule_factor(SchedulerType::kCosine, 0, 0, 100), 1.0);
  EXPECT_NEAR(schedule_factor(SchedulerType::kCosine, 50, 0, 100), 0.5, 1e-15);
  EXPECT_NEAR(schedule_factor(SchedulerType::kCosine, 60, 10, 110), 0.5, 1e-15);
  EXPECT_NEAR(schedule_factor(SchedulerType::kCosine, 25, 0, 100), 0.5 * (1 + std::sqrt(0.5)),
              1e-15);
  EXPECT_NEAR(schedule_factor(SchedulerType::kCosine, 100, 0, 100), 0.0, 1e-15);
  EXPECT_DOUBLE_EQ(schedule_factor(SchedulerType::kCosine, 3, 6, 100), 0.5);
}

TEST(LrSchedule, ConstantsHoldTheRate) {
  EXPECT_DOUBLE_EQ(schedule_factor(SchedulerType::kConstant, 0, 10, 0), 1.0);
  EXPECT_DOUBLE_EQ(schedule_factor(SchedulerType::kConstantWithWarmup, 5, 10, 0), 0.5);
  EXPECT_DOUBLE_EQ(schedule_factor(SchedulerType::kConstantWithWarmup, 500, 10, 0), 1.0);
}

TEST(LrSchedule, NamesAreHuggingFaces) {
  for (auto type : {SchedulerType::kLinear, SchedulerType::kCosine, SchedulerType::kConstant,
                    SchedulerType::kConstantWithWarmup}) {
    EXPECT_EQ(accelerate::parse_scheduler_type(accelerate::to_string(type)), type);
  }
  EXPECT_EQ(accelerate::to_string(SchedulerType::kConstantWithWarmup),
            std::string("constant_with_warmup"));
  EXPECT_FALSE(accelerate::parse_scheduler_type("polynomial").has_value());
}

TEST(LrSchedule, SetsEachGroupsRateStepByStep) {
  auto a = torch::zeros({2}, torch::requires_grad()), b = torch::zeros({2}, torch::requires_grad());
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{a},
                      std::make_unique<torch::optim::SGDOptions>(0.1));
  groups.emplace_back(std::vector<torch::Tensor>{b},
                      std::make_unique<torch::optim::SGDOptions>(0.01));
  torch::optim::SGD optimizer(groups, torch::optim::SGDOptions(1.0));
  accelerate::WarmupSchedule schedule(optimizer, SchedulerType::kLinear, 4, 12);
  const auto rate = [&](std::size_t group) {
    return optimizer.param_groups()[group].options().get_lr();
  };
  EXPECT_DOUBLE_EQ(rate(0), 0.0);  // step 0 of the warm-up
  for (int step = 1; step <= 12; ++step) {
    schedule.step();
    const double factor = schedule_factor(SchedulerType::kLinear, step, 4, 12);
    EXPECT_DOUBLE_EQ(rate(0), 0.1 * factor) << "step " << step;
    EXPECT_DOUBLE_EQ(rate(1), 0.01 * factor) << "step " << step;
  }
  EXPECT_EQ(schedule.steps(), 12);
  EXPECT_DOUBLE_EQ(rate(0), 0.0);
  EXPECT_EQ(schedule.base_lrs(), (std::vector<double>{0.1, 0.01}));
}

TEST(LrSchedule, BadStepCountsAreConfigErrors) {
  auto p = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD optimizer({p}, torch::optim::SGDOptions(0.1));
  EXPECT_THROW(accelerate::WarmupSchedule(optimizer, SchedulerType::kLinear, -1, 10),
               accelerate::ConfigError);
  EXPECT_THROW(accelerate::WarmupSchedule(optimizer, SchedulerType::kCosine, 0, 0),
               accelerate::ConfigError);
  EXPECT_NO_THROW(accelerate::WarmupSchedule(optimizer, SchedulerType::kConstant, 0, 0));
}

}  // namespace
