// DeepSpeed's learning-rate schedules (deepspeed.runtime.lr_schedules), as a
// LibTorch scheduler: what a DeepSpeed config file's "scheduler" section
// names (DummyScheduler builds one from it), usable on its own as well.
//
//   WarmupLR       from warmup_min_lr to warmup_max_lr over warmup_num_steps,
//                  then held
//   WarmupDecayLR  the same warm-up, then linearly down to 0 at
//                  total_num_steps
//   WarmupCosineLR from warmup_min_ratio × each group's learning rate up to
//                  the rate over warmup_num_steps, then half a cosine down to
//                  cos_min_ratio × the rate at total_num_steps
//
// The warm-up follows warmup_type: "log" (DeepSpeed's default: the fraction
// log(i + 1) / log(warmup_num_steps) at step i) or "linear" (i /
// warmup_num_steps), with warmup_num_steps at least 2, as DeepSpeed counts.
// As in DeepSpeed, construction sets the rates of "step -1" (the minimum;
// 0 for WarmupCosineLR) and the k-th step() call those of step k - 1, so the
// first two optimizer steps run at the minimum rate (WarmupCosineLR: 0, then
// warmup_min_ratio × the rate).
//
//   accelerate::Scheduler<accelerate::DeepSpeedSchedule> scheduler(
//       optimizer,
//       accelerate::DeepSpeedScheduleOptions(accelerate::DeepSpeedScheduleType::kWarmupLR)
//                      .warmup_num_steps(100));
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "accelerate/common/arg.h"

namespace accelerate {

enum class DeepSpeedScheduleType { kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };

// "WarmupLR", "WarmupDecayLR", "WarmupCosineLR" (DeepSpeed's names, exact);
// nullopt for anything else.
std::optional<DeepSpeedScheduleType> parse_deepspeed_schedule_type(std::string_view text);
const char* to_string(DeepSpeedScheduleType type);

struct DeepSpeedScheduleOptions {
  explicit DeepSpeedScheduleOptions(DeepSpeedScheduleType type) : type_(type) {}
  ACCELERATE_ARG(DeepSpeedScheduleType, type);
  ACCELERATE_ARG(int64_t, warmup_num_steps) = 1000;
  // "log" or "linear".
  ACCELERATE_ARG(std::string, warmup_type) = "log";
  // WarmupLR / WarmupDecayLR: the rates warmed up from and to; the upper one
  // unset: each group's learning rate (WarmupLR's default; WarmupDecayLR's
  // is 0.001, which a DeepSpeed file gets by leaving it out).
  ACCELERATE_ARG(double, warmup_min_lr) = 0.0;
  ACCELERATE_ARG(std::optional<double>, warmup_max_lr);
  // WarmupDecayLR and WarmupCosineLR (required there).
  ACCELERATE_ARG(std::optional<int64_t>, total_num_steps);
  // WarmupCosineLR: ratios of each group's learning rate.
  ACCELERATE_ARG(double, warmup_min_ratio) = 0.0;
  ACCELERATE_ARG(double, cos_min_ratio) = 0.0001;
};

class DeepSpeedSchedule : public torch::optim::LRScheduler {
 public:
  // Throws ConfigError for a negative warmup_num_steps, a warmup_type other
  // than log/linear, or a missing total_num_steps where one is needed.
  DeepSpeedSchedule(torch::optim::Optimizer& optimizer, DeepSpeedScheduleOptions options);

  const DeepSpeedScheduleOptions& options() const { return options_; }
  // DeepSpeed's last_batch_iteration: -1 before the first step() call.
  int64_t last_batch_iteration() const { return static_cast<int64_t>(step_count_) - 1; }
  // step() calls so far; settable for a checkpoint's resume.
  int64_t steps() const { return static_cast<int64_t>(step_count_); }
  void set_steps(int64_t steps) { step_count_ = static_cast<decltype(step_count_)>(steps); }
  // The groups' rates at DeepSpeed's `iteration` (-1: before any step).
  std::vector<double> rates_at(int64_t iteration) const;

 private:
  std::vector<double> get_lrs() override;
  double warmup_fraction(int64_t iteration) const;

  DeepSpeedScheduleOptions options_;
  int64_t warmup_steps_;          // max(2, warmup_num_steps)
  std::vector<double> base_lrs_;  // each group's rate when constructed
  std::vector<double> min_lrs_, max_lrs_;
};

}  // namespace accelerate
