// LrSchedulerKwargs (accelerate/schedule/lr_schedule.h): which schedule takes which
// parameter, and Hugging Face's JSON form of them.
#include <algorithm>
#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/schedule/lr_schedule.h"
#include "common/strict_json.h"

namespace accelerate {

namespace {

// The parameters each schedule's transformers function accepts.
std::vector<std::string> accepted(SchedulerType type) {
  switch (type) {
    case SchedulerType::kCosine:
    case SchedulerType::kCosineWithRestarts:
      return {"num_cycles"};
    case SchedulerType::kPolynomial:
      return {"lr_end", "power"};
    case SchedulerType::kInverseSqrt:
      return {"timescale"};
    case SchedulerType::kWarmupStableDecay:
      return {"num_cycles",  "num_stable_steps", "num_decay_steps",
              "warmup_type", "decay_type",       "min_lr_ratio"};
    case SchedulerType::kReduceLROnPlateau:
      return {"mode",           "factor",   "patience", "threshold",
              "threshold_mode", "cooldown", "min_lr",   "eps"};
    default:
      return {};
  }
}

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

}  // namespace

std::vector<std::string> LrSchedulerKwargs::set_names() const {
  std::vector<std::string> names;
  const auto add = [&](bool set, const char* name) {
    if (set) names.emplace_back(name);
  };
  add(num_cycles_.has_value(), "num_cycles");
  add(lr_end_.has_value(), "lr_end");
  add(power_.has_value(), "power");
  add(timescale_.has_value(), "timescale");
  add(num_stable_steps_.has_value(), "num_stable_steps");
  add(num_decay_steps_.has_value(), "num_decay_steps");
  add(warmup_type_.has_value(), "warmup_type");
  add(decay_type_.has_value(), "decay_type");
  add(min_lr_ratio_.has_value(), "min_lr_ratio");
  add(mode_.has_value(), "mode");
  add(factor_.has_value(), "factor");
  add(patience_.has_value(), "patience");
  add(threshold_.has_value(), "threshold");
  add(threshold_mode_.has_value(), "threshold_mode");
  add(cooldown_.has_value(), "cooldown");
  add(min_lr_.has_value(), "min_lr");
  add(eps_.has_value(), "eps");
  return names;
}

// transformers ignores the kwargs of constant and constant_with_warmup and
// raises a TypeError elsewhere; a parameter that would silently do nothing
// is refused here for every schedule.
void LrSchedulerKwargs::check_applies_to(SchedulerType type) const {
  const auto takes = accepted(type);
  for (const auto& name : set_names()) {
    if (std::find(takes.begin(), takes.end(), name) == takes.end()) {
      throw ConfigError("lr_scheduler_kwargs: '" + name + "' does not apply to the '" +
                        to_string(type) + "' schedule (it takes " +
                        (takes.empty() ? std::string("none") : joined(takes)) + ")");
    }
  }
}

LrSchedulerKwargs parse_lr_scheduler_kwargs(std::string_view json) {
  LrSchedulerKwargs kwargs;
  const std::string text(json);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return kwargs;
  StrictJsonProblem problem;
  const auto parsed = parse_strict_json(text, StrictJsonLimits{}, &problem);
  const auto fail = [](const std::string& why) {
    throw ConfigError("lr_scheduler_kwargs: " + why);
  };
  if (!parsed) fail("not JSON: " + problem.message);
  if (!parsed->is_object()) fail("expected a JSON object such as {\"num_cycles\": 2}");
  for (const auto& [key, value] : parsed->items()) {
    const auto number = [&, &key = key, &value = value] {
      if (!value.is_number()) fail("'" + key + "' must be a number");
      return value.get<double>();
    };
    const auto integer = [&, &key = key, &value = value] {
      if (!value.is_number_integer()) fail("'" + key + "' must be an integer");
      return value.get<int64_t>();
    };
    const auto string = [&, &key = key, &value = value] {
      if (!value.is_string()) fail("'" + key + "' must be a string");
      return value.get<std::string>();
    };
    const auto shape = [&, &key = key] {
      const std::string name = string();
      const auto parsed_shape = parse_wsd_shape(name);
      if (!parsed_shape) fail("'" + key + "' is '" + name + "'; use linear, cosine or 1-sqrt");
      return *parsed_shape;
    };
    if (key == "num_cycles")
      kwargs.num_cycles(number());
    else if (key == "lr_end")
      kwargs.lr_end(number());
    else if (key == "power")
      kwargs.power(number());
    else if (key == "timescale")
      kwargs.timescale(integer());
    else if (key == "num_stable_steps")
      kwargs.num_stable_steps(integer());
    else if (key == "num_decay_steps")
      kwargs.num_decay_steps(integer());
    else if (key == "warmup_type")
      kwargs.warmup_type(shape());
    else if (key == "decay_type")
      kwargs.decay_type(shape());
    else if (key == "min_lr_ratio")
      kwargs.min_lr_ratio(number());
    else if (key == "mode")
      kwargs.mode(string());
    else if (key == "factor")
      kwargs.factor(number());
    else if (key == "patience")
      kwargs.patience(integer());
    else if (key == "threshold")
      kwargs.threshold(number());
    else if (key == "threshold_mode")
      kwargs.threshold_mode(string());
    else if (key == "cooldown")
      kwargs.cooldown(integer());
    else if (key == "min_lr")
      kwargs.min_lr(number());
    else if (key == "eps")
      kwargs.eps(number());
    else
      fail("unknown parameter '" + key + "'");
  }
  return kwargs;
}

}  // namespace accelerate
