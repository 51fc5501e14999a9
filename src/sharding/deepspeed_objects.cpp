#include "sharding/deepspeed_objects.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include "accelerate/common/errors.h"

namespace accelerate::sharding {
namespace {

// Reads a resolved section's params, refusing what the type does not take.
class Params {
 public:
  Params(const ResolvedParamSection& section, std::string what, std::string source)
      : section_(section), what_(std::move(what)), source_(std::move(source)) {}

  double number(const std::string& key, double fallback) {
    return typed<double>(key, fallback, "a number");
  }
  bool flag(const std::string& key, bool fallback) {
    return typed<bool>(key, fallback, "true or false");
  }
  int64_t count(const std::string& key, int64_t fallback) {
    const double value = number(key, static_cast<double>(fallback));
    if (value < 0 || value != std::floor(value) || value > 1e15) fail(key, "a whole number >= 0");
    return static_cast<int64_t>(value);
  }
  std::string word(const std::string& key, const std::string& fallback) {
    return typed<std::string>(key, fallback, "a string");
  }
  std::tuple<double, double> pair(const std::string& key, std::tuple<double, double> fallback) {
    const char* expected = "a list of two numbers";
    const std::vector<double> list =
        typed<std::vector<double>>(key, {std::get<0>(fallback), std::get<1>(fallback)}, expected);
    if (list.size() != 2) fail(key, expected);
    return {list[0], list[1]};
  }
  bool has(const std::string& key) { return take(key) != nullptr; }
  // Every key must have been read by now.
  void done() const {
    for (const auto& entry : section_.params) {
      if (read_.count(entry.first) == 0) {
        throw ConfigError(source_ + ": " + what_ + ".params." + entry.first + " is not a " +
                          "parameter of " + section_.type + " in accelerate-cpp");
      }
    }
  }

 private:
  // The value of `key` if it is a T, `fallback` if absent; else refused.
  template <class T>
  T typed(const std::string& key, const T& fallback, const char* expected) {
    const ParamValue* value = take(key);
    if (value == nullptr) return fallback;
    if (const T* typed_value = std::get_if<T>(value)) return *typed_value;
    fail(key, expected);
  }
  const ParamValue* take(const std::string& key) {
    read_.insert(key);
    auto it = section_.params.find(key);
    return it == section_.params.end() ? nullptr : &it->second;
  }
  [[noreturn]] void fail(const std::string& key, const std::string& expected) const {
    throw ConfigError(source_ + ": " + what_ + ".params." + key + " expects " + expected);
  }

  const ResolvedParamSection& section_;
  std::string what_, source_;
  std::set<std::string> read_;
};

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

std::unique_ptr<torch::optim::Optimizer> make_adam(Params& p, bool adamw_type,
                                                   std::vector<at::Tensor> params,
                                                   const std::string& source) {
  if (p.has("max_grad_norm")) {
    throw ConfigError(source +
                      ": optimizer.params.max_grad_norm is not supported as an optimizer "
                      "parameter (DeepSpeed refuses it too); use gradient_clipping");
  }
  const bool torch_adam = p.flag("torch_adam", false);
  const bool decoupled = adamw_type || p.flag("adam_w_mode", true);
  if (!p.flag("bias_correction", true)) {
    throw ConfigError(source +
                      ": optimizer.params.bias_correction false is not available in "
                      "accelerate-cpp (LibTorch's Adam always corrects the bias)");
  }
  const double lr = p.number("lr", 1e-3);
  const auto betas = p.pair("betas", {0.9, 0.999});
  const double eps = p.number("eps", 1e-8);
  const double weight_decay = p.number("weight_decay", torch_adam && decoupled ? 0.01 : 0.0);
  const bool amsgrad = p.flag("amsgrad", false);
  if (amsgrad && !torch_adam) {
    throw ConfigError(source +
                      ": optimizer.params.amsgrad true needs \"torch_adam\": true (DeepSpeed's "
                      "own Adam refuses AMSGrad too)");
  }
  p.done();
  if (decoupled) {
    return std::make_unique<torch::optim::AdamW>(std::move(params), torch::optim::AdamWOptions(lr)
                                                                        .betas(betas)
                                                                        .eps(eps)
                                                                        .weight_decay(weight_decay)
                                                                        .amsgrad(amsgrad));
  }
  return std::make_unique<torch::optim::Adam>(std::move(params), torch::optim::AdamOptions(lr)
                                                                     .betas(betas)
                                                                     .eps(eps)
                                                                     .weight_decay(weight_decay)
                                                                     .amsgrad(amsgrad));
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const ResolvedParamSection& section,
                                                        std::vector<at::Tensor> params,
                                                        const std::string& source) {
  Params p(section, "optimizer", source);
  const std::string name = lower(section.type);
  if (name == "adam" || name == "adamw") {
    return make_adam(p, name == "adamw", std::move(params), source);
  }
  if (name == "adagrad") {
    torch::optim::AdagradOptions options(p.number("lr", 1e-2));
    options.lr_decay(p.number("lr_decay", 0))
        .weight_decay(p.number("weight_decay", 0))
        .initial_accumulator_value(p.number("initial_accumulator_value", 0))
        .eps(p.number("eps", 1e-10));
    p.done();
    return std::make_unique<torch::optim::Adagrad>(std::move(params), options);
  }
  if (section.type == "SGD") {
    torch::optim::SGDOptions options(p.number("lr", 1e-3));
    options.momentum(p.number("momentum", 0))
        .dampening(p.number("dampening", 0))
        .weight_decay(p.number("weight_decay", 0))
        .nesterov(p.flag("nesterov", false));
    p.done();
    return std::make_unique<torch::optim::SGD>(std::move(params), options);
  }
  if (section.type == "RMSprop") {
    torch::optim::RMSpropOptions options(p.number("lr", 1e-2));
    options.alpha(p.number("alpha", 0.99))
        .eps(p.number("eps", 1e-8))
        .weight_decay(p.number("weight_decay", 0))
        .momentum(p.number("momentum", 0))
        .centered(p.flag("centered", false));
    p.done();
    return std::make_unique<torch::optim::RMSprop>(std::move(params), options);
  }
  throw ConfigError(source + ": optimizer type \"" + section.type +
                    "\" is not available in accelerate-cpp (DeepSpeed's own kernels are not "
                    "built); use Adam, AdamW, Adagrad, SGD or RMSprop");
}

DeepSpeedScheduleOptions schedule_options(const ResolvedParamSection& section,
                                          const std::string& source) {
  const auto type = parse_deepspeed_schedule_type(section.type);
  if (!type) {
    throw ConfigError(source + ": scheduler type \"" + section.type +
                      "\" is not available in accelerate-cpp; use WarmupLR, WarmupDecayLR or "
                      "WarmupCosineLR");
  }
  Params p(section, "scheduler", source);
  DeepSpeedScheduleOptions options(*type);
  options.warmup_num_steps(p.count("warmup_num_steps", 1000));
  options.warmup_type(p.word("warmup_type", "log"));
  if (*type != DeepSpeedScheduleType::kWarmupLR) {
    if (!p.has("total_num_steps")) {
      throw ConfigError(source + ": scheduler " + section.type + " needs params.total_num_steps");
    }
    options.total_num_steps(p.count("total_num_steps", 0));
  }
  if (*type == DeepSpeedScheduleType::kWarmupCosineLR) {
    options.warmup_min_ratio(p.number("warmup_min_ratio", 0.0));
    options.cos_min_ratio(p.number("cos_min_ratio", 0.0001));
  } else {
    options.warmup_min_lr(p.number("warmup_min_lr", 0.0));
    // WarmupLR's default is each group's rate; WarmupDecayLR's is 0.001.
    const bool decay = *type == DeepSpeedScheduleType::kWarmupDecayLR;
    if (section.params.count("warmup_max_lr") > 0 || decay) {
      options.warmup_max_lr(p.number("warmup_max_lr", 0.001));
    }
  }
  // DeepSpeed's resume point: only its default (load_state restores the position).
  if (p.number("last_batch_iteration", -1) != -1) {
    throw ConfigError(source +
                      ": scheduler.params.last_batch_iteration other than -1 is not "
                      "available in accelerate-cpp (load_state restores a schedule's position)");
  }
  p.done();
  return options;
}

}  // namespace accelerate::sharding
