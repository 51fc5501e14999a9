// DeepSpeed's learning-rate schedules (accelerate/schedule/deepspeed_schedule.h):
// the rates DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR set,
// worked out by hand from their formulas, at construction ("iteration -1")
// and after each step() call, and the settings they refuse.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/schedule/deepspeed_schedule.h"

namespace deepspeed_schedule_test {

using accelerate::DeepSpeedSchedule;
using accelerate::DeepSpeedScheduleOptions;
using accelerate::DeepSpeedScheduleType;

// The first group's rate at construction, then after each of `calls` step() calls.
std::vector<double> rates(const DeepSpeedScheduleOptions& options, int calls, double lr = 1.0) {
  auto weight = torch::zeros({2}, torch::requires_grad());
  torch::optim::SGD optimizer({weight}, torch::optim::SGDOptions(lr));
  DeepSpeedSchedule schedule(optimizer, options);
  std::vector<double> seen{optimizer.param_groups()[0].options().get_lr()};
  for (int k = 0; k < calls; ++k) {
    schedule.step();
    seen.push_back(optimizer.param_groups()[0].options().get_lr());
  }
  EXPECT_EQ(schedule.last_batch_iteration(), calls - 1);
  return seen;
}

void expect_rates(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-12) << "after " << i << " step() calls";
  }
}

TEST(DeepSpeedSchedule, WarmupLrLogAndLinear) {
  // log: min + (max - min) * log(i + 1) / log(4) at iteration i < 4, then max.
  expect_rates(rates(DeepSpeedScheduleOptions(DeepSpeedScheduleType::kWarmupLR)
                         .warmup_num_steps(4)
                         .warmup_max_lr(0.1),
                     6),
               {0.0, 0.0, 0.1 * std::log(2.0) / std::log(4.0), 0.1 * std::log(3.0) / std::log(4.0),
                0.1, 0.1, 0.1});
  // linear from 0.01, to each group's rate (0.5) when warmup_max_lr is unset.
  expect_rates(rates(DeepSpeedScheduleOptions(DeepSpeedScheduleType::kWarmupLR)
                         .warmup_num_steps(4)
                         .warmup_type("linear")
                         .warmup_min_lr(0.01),
                     5, /*lr=*/0.5),
               {0.01, 0.01, 0.01 + 0.49 * 0.25, 0.01 + 0.49 * 0.5, 0.01 + 0.49 * 0.75, 0.5});
  // warmup_num_steps below 2 counts as 2 (DeepSpeed's max(2, n)).
  expect_rates(rates(DeepSpeedScheduleOptions(DeepSpeedScheduleType::kWarmupLR)
                         .warmup_num_steps(0)
                         .warmup_type("linear")
                         .warmup_max_lr(1.0),
                     3),
               {0.0, 0.0, 0.5, 1.0});
}

TEST(DeepSpeedSchedule, WarmupDecayLrFallsLinearlyToZeroAtTheTotal) {
  // Warm-up over 2, then (6 - i) / (6 - 2) of the rate, never below 0.
  expect_rates(rates(DeepSpeedScheduleOptions(DeepSpeedScheduleType::kWarmupDecayLR)
                         .warmup_num_steps(2)
                         .warmup_type("linear")
                         .warmup_max_lr(1.0)
                         .total_num_steps(6),
                     8),
               {0.0, 0.0, 0.5, 1.0, 0.75, 0.5, 0.25, 0.0, 0.0});
}

TEST(DeepSpeedSchedule, WarmupCosineLrIsRelativeToTheGroupsRate) {
  // Ratio warmup_min_ratio + i/2 (1 - warmup_min_ratio) in warm-up, then
  // cos_min + (1 - cos_min) (1 + cos(pi p)) / 2 with p = (i - 1) / 4,
  // clamped at 1; 0 before the first step.
  const double lr = 0.2, floor = 0.1;
  const auto cosine = [&](double p) { return floor + (1 - floor) * (1 + std::cos(M_PI * p)) / 2; };
  expect_rates(rates(DeepSpeedScheduleOptions(DeepSpeedScheduleType::kWarmupCosineLR)
                         .warmup_num_steps(2)
                         .warmup_type("linear")
                         .warmup_min_ratio(0.5)
                         .cos_min_ratio(floor)
                         .total_num_steps(6),
                     8, lr),
               {0.0, lr * 0.5, lr * 0.75, lr * cosine(0.25), lr * cosine(0.5), lr * cosine(0.75),
                lr * floor, lr * floor, lr * floor});
}

TEST(DeepSpeedSchedule, RefusesWhatItCannotRun) {
  auto weight = torch::zeros({2}, torch::requires_grad());
  torch::optim::SGD optimizer({weight}, torch::optim::SGDOptions(1.0));
  const auto message = [&](const DeepSpeedScheduleOptions& options) -> std::string {
    try {
      DeepSpeedSchedule schedule(optimizer, options);
    } catch (const accelerate::ConfigError& error) {
      return error.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(message(DeepSpeedScheduleOptions(DeepSpeedScheduleType::kWarmupDecayLR)),
            "WarmupDecayLR needs total_num_steps");
  EXPECT_EQ(
      message(DeepSpeedScheduleOptions(DeepSpeedScheduleType::kWarmupLR).warmup_type("cubic")),
      "WarmupLR: warmup_type expects \"log\" or \"linear\", got \"cubic\"");
  EXPECT_EQ(
      message(DeepSpeedScheduleOptions(DeepSpeedScheduleType::kWarmupLR).warmup_num_steps(-1)),
      "WarmupLR: warmup_num_steps must not be negative, got -1");
  EXPECT_EQ(accelerate::parse_deepspeed_schedule_type("WarmupCosineLR"),
            DeepSpeedScheduleType::kWarmupCosineLR);
  EXPECT_FALSE(accelerate::parse_deepspeed_schedule_type("OneCycle").has_value());
  EXPECT_FALSE(accelerate::parse_deepspeed_schedule_type("warmuplr").has_value());
}

}  // namespace deepspeed_schedule_test
