// Hugging Face's learning-rate schedules (transformers.get_scheduler) as a
// LibTorch scheduler: warm up linearly from 0 to each group's learning rate
// over num_warmup_steps, then hold it (constant_with_warmup), decay it
// linearly to 0 at num_training_steps (linear), or follow half a cosine to 0
// (cosine). "constant" holds it from the start.
//
//   accelerate::Scheduler<accelerate::WarmupSchedule> scheduler(
//       optimizer, accelerate::SchedulerType::kLinear, /*num_warmup_steps=*/100,
//       /*num_training_steps=*/10000);
//   ... optimizer.step(); scheduler.step();
//
// As with Python's LambdaLR, construction sets the rates of step 0 and the
// k-th step() call sets those of step k. Wrapped in accelerate::Scheduler,
// it advances only on real optimizer steps and is saved by save_state.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace accelerate {

enum class SchedulerType { kLinear, kCosine, kConstant, kConstantWithWarmup };

// "linear", "cosine", "constant", "constant_with_warmup" (Hugging Face's
// lr_scheduler_type names); nullopt for anything else.
std::optional<SchedulerType> parse_scheduler_type(std::string_view text);
const char* to_string(SchedulerType type);

// The factor on the base learning rate at `step` (Hugging Face's lambdas).
double schedule_factor(SchedulerType type, int64_t step, int64_t num_warmup_steps,
                       int64_t num_training_steps);

class WarmupSchedule : public torch::optim::LRScheduler {
 public:
  // Throws accelerate::ConfigError for negative step counts, or a decaying
  // schedule with num_training_steps 0.
  WarmupSchedule(torch::optim::Optimizer& optimizer, SchedulerType type, int64_t num_warmup_steps,
                 int64_t num_training_steps);

  // The rates of the groups at step 0 (their rates when constructed).
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // Steps taken so far (the k of the last step() call).
  int64_t steps() const { return static_cast<int64_t>(step_count_); }

 private:
  std::vector<double> get_lrs() override;
  std::vector<double> rates_at(int64_t step) const;

  SchedulerType type_;
  int64_t num_warmup_steps_, num_training_steps_;
  std::vector<double> base_lrs_;
  torch::optim::Optimizer& optimizer_;
};

}  // namespace accelerate
