#include "accelerate/schedule/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "accelerate/common/errors.h"
#include "accelerate/detail/enum_names.h"

namespace accelerate {

namespace {

// Transformers' SchedulerType values, matched exactly.
constexpr detail::EnumName<SchedulerType> kSchedulerTypeNames[] = {
    {SchedulerType::kLinear, "linear"},
    {SchedulerType::kCosine, "cosine"},
    {SchedulerType::kConstant, "constant"},
    {SchedulerType::kConstantWithWarmup, "constant_with_warmup"},
    {SchedulerType::kCosineWithRestarts, "cosine_with_restarts"},
    {SchedulerType::kPolynomial, "polynomial"},
    {SchedulerType::kInverseSqrt, "inverse_sqrt"},
    {SchedulerType::kReduceLROnPlateau, "reduce_lr_on_plateau"},
    {SchedulerType::kWarmupStableDecay, "warmup_stable_decay"}};
static_assert(detail::names_are_distinct(kSchedulerTypeNames));

constexpr detail::EnumName<WsdShape> kWsdShapeNames[] = {{WsdShape::kLinear, "linear"},
                                                         {WsdShape::kCosine, "cosine"},
                                                         {WsdShape::kOneMinusSqrt, "1-sqrt"}};
static_assert(detail::names_are_distinct(kWsdShapeNames));

double warmup_factor(int64_t step, int64_t num_warmup_steps) {
  return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, num_warmup_steps));
}

// The order of the floating-point operations follows transformers' lambdas,
// so that the rates are the same to the last bit or close to it.
double cosine_factor(double num_cycles, double progress) {
  return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * num_cycles * 2.0 * progress)));
}

double wsd_factor(int64_t step, int64_t warmup, int64_t training, const LrSchedulerKwargs& kw) {
  const double min_ratio = kw.min_lr_ratio().value_or(0.0);
  const int64_t decay = kw.num_decay_steps().value_or(0);
  const int64_t stable = kw.num_stable_steps().value_or(training - warmup - decay);
  const auto scaled = [&](double factor) {
    return std::max(0.0, factor * (1.0 - min_ratio) + min_ratio);
  };
  if (step < warmup) {
    const double progress = warmup_factor(step, warmup);
    switch (kw.warmup_type().value_or(WsdShape::kLinear)) {
      case WsdShape::kLinear:
        return scaled(progress);
      case WsdShape::kCosine:
        return scaled(0.5 * (1.0 - std::cos(M_PI * progress)));
      case WsdShape::kOneMinusSqrt:
        return scaled(1.0 - std::sqrt(1.0 - progress));
    }
  }
  if (step < warmup + stable) return 1.0;
  if (step < warmup + stable + decay) {
    const double progress = static_cast<double>(step - warmup - stable) /
                            static_cast<double>(std::max<int64_t>(1, decay));
    switch (kw.decay_type().value_or(WsdShape::kCosine)) {
      case WsdShape::kLinear:
        return scaled(1.0 - progress);
      case WsdShape::kCosine:
        return scaled(0.5 *
                      (1.0 + std::cos(M_PI * kw.num_cycles().value_or(0.5) * 2.0 * progress)));
      case WsdShape::kOneMinusSqrt:
        return scaled(1.0 - std::sqrt(progress));
    }
  }
  return min_ratio;
}

double polynomial_factor(int64_t step, int64_t warmup, int64_t training,
                         const LrSchedulerKwargs& kw, double lr_init) {
  const double lr_end = kw.lr_end().value_or(1e-7);
  if (step > training) return lr_end / lr_init;
  const double lr_range = lr_init - lr_end;
  const double pct_remaining =
      1 - static_cast<double>(step - warmup) / static_cast<double>(training - warmup);
  const double decay = lr_range * std::pow(pct_remaining, kw.power().value_or(1.0)) + lr_end;
  return decay / lr_init;
}

int64_t inverse_sqrt_timescale(int64_t warmup, const LrSchedulerKwargs& kw) {
  return kw.timescale().value_or(warmup ? warmup : 10000);
}

}  // namespace

std::optional<SchedulerType> parse_scheduler_type(std::string_view text) {
  return detail::parse_enum(kSchedulerTypeNames, text, detail::NameCase::kExact);
}

const char* to_string(SchedulerType type) {
  return detail::enum_name(kSchedulerTypeNames, type, "?");
}

std::string scheduler_type_names() { return detail::joined_names(kSchedulerTypeNames); }

std::optional<WsdShape> parse_wsd_shape(std::string_view text) {
  return detail::parse_enum(kWsdShapeNames, text, detail::NameCase::kExact);
}

const char* to_string(WsdShape shape) { return detail::enum_name(kWsdShapeNames, shape, "?"); }

double schedule_factor(SchedulerType type, int64_t step, int64_t num_warmup_steps,
                       int64_t num_training_steps, const LrSchedulerKwargs& kwargs,
                       double lr_init) {
  switch (type) {
    case SchedulerType::kConstant:
    case SchedulerType::kReduceLROnPlateau:
      return 1.0;
    case SchedulerType::kWarmupStableDecay:
      return wsd_factor(step, num_warmup_steps, num_training_steps, kwargs);
    default:
      break;
  }
  if (step < num_warmup_steps) return warmup_factor(step, num_warmup_steps);
  const double decay_steps =
      static_cast<double>(std::max<int64_t>(1, num_training_steps - num_warmup_steps));
  const double progress = static_cast<double>(step - num_warmup_steps) / decay_steps;
  switch (type) {
    case SchedulerType::kConstantWithWarmup:
      return 1.0;
    case SchedulerType::kLinear:
      return std::max(0.0, static_cast<double>(num_training_steps - step) / decay_steps);
    case SchedulerType::kCosine:
      return cosine_factor(kwargs.num_cycles().value_or(0.5), progress);
    case SchedulerType::kCosineWithRestarts:
      if (progress >= 1.0) return 0.0;
      return std::max(
          0.0, 0.5 * (1.0 + std::cos(M_PI * std::fmod(kwargs.num_cycles().value_or(1.0) * progress,
                                                      1.0))));
    case SchedulerType::kPolynomial:
      return polynomial_factor(step, num_warmup_steps, num_training_steps, kwargs, lr_init);
    case SchedulerType::kInverseSqrt: {
      const int64_t timescale = inverse_sqrt_timescale(num_warmup_steps, kwargs);
      const int64_t shift = timescale - num_warmup_steps;
      return 1.0 / std::sqrt(static_cast<double>(step + shift) / static_cast<double>(timescale));
    }
    default:
      return 1.0;
  }
}

WarmupSchedule::WarmupSchedule(torch::optim::Optimizer& optimizer, SchedulerType type,
                               int64_t num_warmup_steps, int64_t num_training_steps,
                               LrSchedulerKwargs kwargs)
    : torch::optim::LRScheduler(optimizer),
      type_(type),
      num_warmup_steps_(num_warmup_steps),
      num_training_steps_(num_training_steps),
      kwargs_(std::move(kwargs)),
      lr_init_(optimizer.defaults().get_lr()),
      base_lrs_(get_current_lrs()),
      optimizer_(optimizer) {
  const auto refuse = [&](const std::string& problem) {
    throw ConfigError(std::string("the '") + to_string(type) +
                      "' learning-rate schedule: " + problem);
  };
  if (num_warmup_steps < 0 || num_training_steps < 0) {
    throw ConfigError("the learning-rate schedule's step counts must not be negative (warmup " +
                      std::to_string(num_warmup_steps) + ", training " +
                      std::to_string(num_training_steps) + ")");
  }
  kwargs_.check_applies_to(type);
  const bool decays = type == SchedulerType::kLinear || type == SchedulerType::kCosine ||
                      type == SchedulerType::kCosineWithRestarts ||
                      type == SchedulerType::kPolynomial;
  if (decays && num_training_steps == 0) refuse("needs the number of training steps");
  if (type == SchedulerType::kPolynomial) {
    const double lr_end = kwargs_.lr_end().value_or(1e-7);
    if (!(lr_init_ > lr_end)) {
      refuse("lr_end (" + std::to_string(lr_end) + ") must be smaller than the initial rate (" +
             std::to_string(lr_init_) + ")");
    }
    // transformers divides by zero at the end of the warm-up then.
    if (num_training_steps == num_warmup_steps) {
      refuse("needs more training steps than warm-up steps");
    }
  }
  if (type == SchedulerType::kInverseSqrt &&
      inverse_sqrt_timescale(num_warmup_steps, kwargs_) <= 0) {
    refuse("timescale must be positive");
  }
  if (type == SchedulerType::kWarmupStableDecay) {
    if (!kwargs_.num_decay_steps()) refuse("lr_scheduler_kwargs must give num_decay_steps");
    if (*kwargs_.num_decay_steps() < 0 || kwargs_.num_stable_steps().value_or(0) < 0) {
      refuse("num_decay_steps and num_stable_steps must not be negative");
    }
    if (!(kwargs_.min_lr_ratio().value_or(0.0) >= 0.0)) refuse("min_lr_ratio must not be negative");
  }
  const std::vector<double> initial = rates_at(0);
  for (std::size_t i = 0; i < initial.size(); ++i) {
    optimizer_.param_groups()[i].options().set_lr(initial[i]);
  }
}

std::vector<double> WarmupSchedule::rates_at(int64_t step) const {
  const double factor =
      schedule_factor(type_, step, num_warmup_steps_, num_training_steps_, kwargs_, lr_init_);
  std::vector<double> rates;
  for (double base : base_lrs_) rates.push_back(base * factor);
  return rates;
}

// LRScheduler::step() asks before it counts the step: this is step k + 1.
std::vector<double> WarmupSchedule::get_lrs() {
  // The plateau scheduler owns the rates; steps leave them alone.
  if (type_ == SchedulerType::kReduceLROnPlateau) return get_current_lrs();
  return rates_at(static_cast<int64_t>(step_count_) + 1);
}

}  // namespace accelerate
