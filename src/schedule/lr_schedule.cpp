#include "accelerate/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "accelerate/detail/enum_names.h"
#include "accelerate/errors.h"

namespace accelerate {

namespace {

// Transformers' SchedulerType values, matched exactly.
constexpr detail::EnumName<SchedulerType> kSchedulerTypeNames[] = {
    {SchedulerType::kLinear, "linear"},
    {SchedulerType::kCosine, "cosine"},
    {SchedulerType::kConstant, "constant"},
    {SchedulerType::kConstantWithWarmup, "constant_with_warmup"}};
static_assert(detail::names_are_distinct(kSchedulerTypeNames));

}  // namespace

std::optional<SchedulerType> parse_scheduler_type(std::string_view text) {
  return detail::parse_enum(kSchedulerTypeNames, text, detail::NameCase::kExact);
}

const char* to_string(SchedulerType type) {
  return detail::enum_name(kSchedulerTypeNames, type, "?");
}

double schedule_factor(SchedulerType type, int64_t step, int64_t num_warmup_steps,
                       int64_t num_training_steps) {
  if (type == SchedulerType::kConstant) return 1.0;
  if (step < num_warmup_steps) {
    return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, num_warmup_steps));
  }
  if (type == SchedulerType::kConstantWithWarmup) return 1.0;
  const double remaining = static_cast<double>(num_training_steps - step);
  const double decay_steps =
      static_cast<double>(std::max<int64_t>(1, num_training_steps - num_warmup_steps));
  if (type == SchedulerType::kLinear) return std::max(0.0, remaining / decay_steps);
  const double progress = static_cast<double>(step - num_warmup_steps) / decay_steps;
  return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));  // half a cosine
}

WarmupSchedule::WarmupSchedule(torch::optim::Optimizer& optimizer, SchedulerType type,
                               int64_t num_warmup_steps, int64_t num_training_steps)
    : torch::optim::LRScheduler(optimizer),
      type_(type),
      num_warmup_steps_(num_warmup_steps),
      num_training_steps_(num_training_steps),
      base_lrs_(get_current_lrs()),
      optimizer_(optimizer) {
  if (num_warmup_steps < 0 || num_training_steps < 0) {
    throw ConfigError("the learning-rate schedule's step counts must not be negative (warmup " +
                      std::to_string(num_warmup_steps) + ", training " +
                      std::to_string(num_training_steps) + ")");
  }
  const bool decays = type == SchedulerType::kLinear || type == SchedulerType::kCosine;
  if (decays && num_training_steps == 0) {
    throw ConfigError(std::string("the '") + to_string(type) +
                      "' learning-rate schedule needs the number of training steps");
  }
  const std::vector<double> initial = rates_at(0);
  for (std::size_t i = 0; i < initial.size(); ++i) {
    optimizer_.param_groups()[i].options().set_lr(initial[i]);
  }
}

std::vector<double> WarmupSchedule::rates_at(int64_t step) const {
  const double factor = schedule_factor(type_, step, num_warmup_steps_, num_training_steps_);
  std::vector<double> rates;
  for (double base : base_lrs_) rates.push_back(base * factor);
  return rates;
}

// LRScheduler::step() asks before it counts the step: this is step k + 1.
std::vector<double> WarmupSchedule::get_lrs() {
  return rates_at(static_cast<int64_t>(step_count_) + 1);
}

}  // namespace accelerate
