#include "accelerate/schedule/deepspeed_schedule.h"

#include <algorithm>
#include <cmath>

#include "accelerate/common/errors.h"
#include "accelerate/detail/enum_names.h"

namespace accelerate {

namespace {

// DeepSpeed's scheduler "type" values, matched exactly.
constexpr detail::EnumName<DeepSpeedScheduleType> kDeepSpeedScheduleTypeNames[] = {
    {DeepSpeedScheduleType::kWarmupLR, "WarmupLR"},
    {DeepSpeedScheduleType::kWarmupDecayLR, "WarmupDecayLR"},
    {DeepSpeedScheduleType::kWarmupCosineLR, "WarmupCosineLR"}};
static_assert(detail::names_are_distinct(kDeepSpeedScheduleTypeNames));

}  // namespace

std::optional<DeepSpeedScheduleType> parse_deepspeed_schedule_type(std::string_view text) {
  return detail::parse_enum(kDeepSpeedScheduleTypeNames, text, detail::NameCase::kExact);
}

const char* to_string(DeepSpeedScheduleType type) {
  return detail::enum_name(kDeepSpeedScheduleTypeNames, type, "?");
}

DeepSpeedSchedule::DeepSpeedSchedule(torch::optim::Optimizer& optimizer,
                                     DeepSpeedScheduleOptions options)
    : torch::optim::LRScheduler(optimizer),
      options_(std::move(options)),
      warmup_steps_(std::max<int64_t>(2, options_.warmup_num_steps())),
      base_lrs_(get_current_lrs()) {
  const std::string name = to_string(options_.type());
  if (options_.warmup_num_steps() < 0) {
    throw ConfigError(name + ": warmup_num_steps must not be negative, got " +
                      std::to_string(options_.warmup_num_steps()));
  }
  if (options_.warmup_type() != "log" && options_.warmup_type() != "linear") {
    throw ConfigError(name + ": warmup_type expects \"log\" or \"linear\", got \"" +
                      options_.warmup_type() + "\"");
  }
  if (options_.type() != DeepSpeedScheduleType::kWarmupLR && !options_.total_num_steps()) {
    throw ConfigError(name + " needs total_num_steps");
  }
  for (double base : base_lrs_) {
    min_lrs_.push_back(options_.warmup_min_lr());
    max_lrs_.push_back(options_.warmup_max_lr().value_or(base));
  }
  const std::vector<double> initial = rates_at(-1);
  for (std::size_t i = 0; i < initial.size(); ++i) {
    optimizer.param_groups()[i].options().set_lr(initial[i]);
  }
}

double DeepSpeedSchedule::warmup_fraction(int64_t iteration) const {
  if (options_.warmup_type() == "log") {
    return std::log(static_cast<double>(iteration + 1)) /
           std::log(static_cast<double>(warmup_steps_));
  }
  return static_cast<double>(iteration) / static_cast<double>(warmup_steps_);
}

std::vector<double> DeepSpeedSchedule::rates_at(int64_t iteration) const {
  std::vector<double> rates;
  if (options_.type() == DeepSpeedScheduleType::kWarmupCosineLR) {
    double ratio = 0.0;  // DeepSpeed's rate before the first step
    if (iteration >= 0 && iteration < warmup_steps_) {
      ratio = options_.warmup_min_ratio() +
              warmup_fraction(iteration) * (1.0 - options_.warmup_min_ratio());
    } else if (iteration >= 0) {
      const double done = static_cast<double>(iteration - warmup_steps_ + 1);
      const double span =
          static_cast<double>(std::max<int64_t>(1, *options_.total_num_steps() - warmup_steps_));
      const double progress = std::min(1.0, done / span);
      const double cosine = (1.0 + std::cos(M_PI * progress)) / 2.0;
      ratio = std::max(0.0, options_.cos_min_ratio() + (1.0 - options_.cos_min_ratio()) * cosine);
    }
    for (double base : base_lrs_) rates.push_back(base * ratio);
    return rates;
  }
  double gamma = 0.0;  // before the first step: the minimum
  if (iteration >= 0 && iteration < warmup_steps_) {
    gamma = warmup_fraction(iteration);
  } else if (iteration >= 0) {
    gamma = 1.0;
    if (options_.type() == DeepSpeedScheduleType::kWarmupDecayLR) {
      const double total = static_cast<double>(*options_.total_num_steps());
      gamma = std::max(0.0, (total - static_cast<double>(iteration)) /
                                std::max(1.0, total - static_cast<double>(warmup_steps_)));
    }
  }
  for (std::size_t i = 0; i < min_lrs_.size(); ++i) {
    rates.push_back(min_lrs_[i] + (max_lrs_[i] - min_lrs_[i]) * gamma);
  }
  return rates;
}

// LRScheduler::step() asks before it counts the call: the k-th call (k from
// 1) sets DeepSpeed's iteration k - 1.
std::vector<double> DeepSpeedSchedule::get_lrs() {
  return rates_at(static_cast<int64_t>(step_count_));
}

}  // namespace accelerate
