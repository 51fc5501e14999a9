// Hugging Face's learning-rate schedules (accelerate/schedule/lr_schedule.h): the
// factors at chosen steps, worked out by hand from transformers'
// definitions, and the rates a WarmupSchedule sets on a real optimizer.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include "accelerate/common/errors.h"
#include "accelerate/schedule/lr_schedule.h"
#include "accelerate/schedule/reduce_lr_on_plateau.h"

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
  EXPECT_EQ(accelerate::parse_scheduler_type("polynomial"), SchedulerType::kPolynomial);
  EXPECT_EQ(accelerate::parse_scheduler_type("warmup_stable_decay"),
            SchedulerType::kWarmupStableDecay);
  EXPECT_FALSE(accelerate::parse_scheduler_type("step").has_value());
}

// A few points worked out by hand from transformers' lambdas (the test
// against transformers itself, every step, is trainer_reference_tests).
TEST(LrSchedule, NewSchedulesAtHandWorkedSteps) {
  using K = accelerate::LrSchedulerKwargs;
  // Two cosines over 20 decay steps: a restart at step 10.
  EXPECT_NEAR(schedule_factor(SchedulerType::kCosineWithRestarts, 10, 0, 20, K().num_cycles(2)),
              1.0, 1e-15);
  EXPECT_NEAR(schedule_factor(SchedulerType::kCosineWithRestarts, 5, 0, 20, K().num_cycles(2)), 0.5,
              1e-15);
  EXPECT_EQ(schedule_factor(SchedulerType::kCosineWithRestarts, 20, 0, 20), 0.0);
  // Polynomial, power 1, from 1 to 0.2 (relative to lr_init 1): halfway 0.6.
  EXPECT_NEAR(schedule_factor(SchedulerType::kPolynomial, 5, 0, 10, K().lr_end(0.2), 1.0), 0.6,
              1e-15);
  EXPECT_DOUBLE_EQ(schedule_factor(SchedulerType::kPolynomial, 11, 0, 10, K().lr_end(0.2), 2.0),
                   0.1);
  // Inverse square root with timescale = warm-up 4: 1/sqrt(16/4) at step 16.
  EXPECT_DOUBLE_EQ(schedule_factor(SchedulerType::kInverseSqrt, 16, 4, 0), 0.5);
  // Warm-up 2, stable 3, linear decay 4 to min_lr_ratio 0.2.
  const K wsd = K().num_decay_steps(4)
                    .num_stable_steps(3)
                    .decay_type(accelerate::WsdShape::kLinear)
                    .min_lr_ratio(0.2);
  EXPECT_DOUBLE_EQ(schedule_factor(SchedulerType::kWarmupStableDecay, 1, 2, 0, wsd), 0.6);
  EXPECT_DOUBLE_EQ(schedule_factor(SchedulerType::kWarmupStableDecay, 4, 2, 0, wsd), 1.0);
  EXPECT_DOUBLE_EQ(schedule_factor(SchedulerType::kWarmupStableDecay, 7, 2, 0, wsd), 0.6);
  EXPECT_DOUBLE_EQ(schedule_factor(SchedulerType::kWarmupStableDecay, 30, 2, 0, wsd), 0.2);
}

TEST(LrSchedule, KwargsAreCheckedAndParsedFromJson) {
  const auto kwargs = accelerate::parse_lr_scheduler_kwargs(
      R"({"num_decay_steps": 5, "decay_type": "1-sqrt", "min_lr_ratio": 0.1})");
  EXPECT_EQ(kwargs.num_decay_steps(), 5);
  EXPECT_EQ(kwargs.decay_type(), accelerate::WsdShape::kOneMinusSqrt);
  EXPECT_EQ(kwargs.set_names(),
            (std::vector<std::string>{"num_decay_steps", "decay_type", "min_lr_ratio"}));
  EXPECT_NO_THROW(kwargs.check_applies_to(SchedulerType::kWarmupStableDecay));
  try {
    kwargs.check_applies_to(SchedulerType::kPolynomial);
    ADD_FAILURE() << "no error";
  } catch (const accelerate::ConfigError& error) {
    EXPECT_EQ(std::string(error.what()),
              "lr_scheduler_kwargs: 'num_decay_steps' does not apply to the 'polynomial' "
              "schedule (it takes lr_end, power)");
  }
  EXPECT_TRUE(accelerate::parse_lr_scheduler_kwargs("").set_names().empty());
  for (const char* bad : {R"({"num_cycle": 2})", R"({"timescale": 2.5})", R"({"mode": 1})",
                          R"({"decay_type": "square"})", "[1]", "{"}) {
    EXPECT_THROW(accelerate::parse_lr_scheduler_kwargs(bad), accelerate::ConfigError) << bad;
  }
}

TEST(LrSchedule, SchedulesRefuseWhatTransformersRefuses) {
  auto p = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD optimizer({p}, torch::optim::SGDOptions(0.1));
  using K = accelerate::LrSchedulerKwargs;
  // lr_end must be below the initial rate.
  EXPECT_THROW(
      accelerate::WarmupSchedule(optimizer, SchedulerType::kPolynomial, 0, 10, K().lr_end(0.5)),
      accelerate::ConfigError);
  // warmup_stable_decay needs num_decay_steps.
  EXPECT_THROW(accelerate::WarmupSchedule(optimizer, SchedulerType::kWarmupStableDecay, 0, 10),
               accelerate::ConfigError);
  EXPECT_THROW(
      accelerate::WarmupSchedule(optimizer, SchedulerType::kLinear, 0, 10, K().num_cycles(2)),
      accelerate::ConfigError);
  EXPECT_THROW(accelerate::ReduceLROnPlateau(optimizer, K().factor(1.0)), accelerate::ConfigError);
  EXPECT_THROW(accelerate::ReduceLROnPlateau(optimizer, K().mode("lowest")),
               accelerate::ConfigError);
}

// torch's ReduceLROnPlateau by hand: patience 1, factor 0.5, cooldown 1.
TEST(LrSchedule, PlateauReducesAfterPatienceAndCoolsDown) {
  auto p = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD optimizer({p}, torch::optim::SGDOptions(0.8));
  accelerate::ReduceLROnPlateau plateau(
      optimizer, accelerate::LrSchedulerKwargs().patience(1).factor(0.5).cooldown(1));
  const auto rate = [&] { return optimizer.param_groups()[0].options().get_lr(); };
  plateau.step(1.0);  // best
  plateau.step(1.0);  // 1 bad
  EXPECT_DOUBLE_EQ(rate(), 0.8);
  plateau.step(1.0);  // 2 bad > patience: halved, cooldown 1
  EXPECT_DOUBLE_EQ(rate(), 0.4);
  plateau.step(1.0);  // in the cooldown: not counted
  plateau.step(1.0);  // 1 bad
  EXPECT_DOUBLE_EQ(rate(), 0.4);
  plateau.step(0.5);  // better
  EXPECT_EQ(plateau.num_bad_epochs(), 0);
  EXPECT_DOUBLE_EQ(plateau.best(), 0.5);
  plateau.step(0.6);
  plateau.step(0.6);
  EXPECT_DOUBLE_EQ(rate(), 0.2);
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
