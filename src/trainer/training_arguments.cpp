#include "accelerate/training_arguments.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "accelerate/detail/enum_names.h"
#include "accelerate/errors.h"

namespace accelerate {

namespace {

// Transformers' IntervalStrategy values, matched exactly.
constexpr detail::EnumName<IntervalStrategy> kIntervalStrategyNames[] = {
    {IntervalStrategy::kNo, "no"},
    {IntervalStrategy::kSteps, "steps"},
    {IntervalStrategy::kEpoch, "epoch"}};
static_assert(detail::names_are_distinct(kIntervalStrategyNames));

// Transformers' OptimizerNames values this Trainer has, matched exactly.
constexpr detail::EnumName<OptimizerName> kOptimizerNames[] = {
    {OptimizerName::kAdamWTorch, "adamw_torch"},
    {OptimizerName::kSgd, "sgd"},
    {OptimizerName::kAdafactor, "adafactor"}};
static_assert(detail::names_are_distinct(kOptimizerNames));

}  // namespace

std::optional<OptimizerName> parse_optimizer_name(const std::string& text) {
  return detail::parse_enum(kOptimizerNames, text, detail::NameCase::kExact);
}

OptimizerName require_optimizer_name(const std::string& text) {
  if (auto name = parse_optimizer_name(text)) return *name;
  throw ConfigError("optim '" + text + "' is not one of: " + detail::joined_names(kOptimizerNames));
}

const char* to_string(OptimizerName name) { return detail::enum_name(kOptimizerNames, name, "?"); }

std::vector<std::pair<std::string, std::string>> parse_optim_args(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> entries;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    std::string item = text.substr(start, end - start);
    const auto first = item.find_first_not_of(' '), last = item.find_last_not_of(' ');
    item = first == std::string::npos ? "" : item.substr(first, last - first + 1);
    if (!item.empty()) {
      const auto equals = item.find('=');
      if (equals == std::string::npos || equals == 0) {
        throw ConfigError("optim_args: '" + item + "' is not key=value");
      }
      entries.emplace_back(item.substr(0, equals), item.substr(equals + 1));
    }
    start = end + 1;
  }
  return entries;
}

std::optional<IntervalStrategy> parse_interval_strategy(const std::string& text) {
  return detail::parse_enum(kIntervalStrategyNames, text, detail::NameCase::kExact);
}

const char* to_string(IntervalStrategy strategy) {
  return detail::enum_name(kIntervalStrategyNames, strategy, "?");
}

std::optional<std::string> TrainingArguments::best_metric_key() const {
  std::optional<std::string> name = metric_for_best_model();
  if (!name && load_best_model_at_end()) name = "loss";  // Hugging Face's default
  if (!name) return std::nullopt;
  return name->rfind("eval_", 0) == 0 ? *name : "eval_" + *name;
}

bool TrainingArguments::best_metric_greater_is_better() const {
  if (greater_is_better()) return *greater_is_better();
  const auto key = best_metric_key();
  const std::string suffix = "loss";
  // Hugging Face: a larger value is better unless the name ends in "loss".
  return !(key && key->size() >= suffix.size() &&
           key->compare(key->size() - suffix.size(), suffix.size(), suffix) == 0);
}

void TrainingArguments::validate() const {
  const auto require = [](bool ok, const std::string& problem) {
    if (!ok) throw ConfigError("TrainingArguments: " + problem);
  };
  require(per_device_train_batch_size() > 0, "per_device_train_batch_size must be positive");
  require(per_device_eval_batch_size() > 0, "per_device_eval_batch_size must be positive");
  require(gradient_accumulation_steps() > 0, "gradient_accumulation_steps must be positive");
  require(learning_rate() >= 0, "learning_rate must not be negative");
  require(max_grad_norm() >= 0, "max_grad_norm must not be negative (0: no clipping)");
  require(max_steps() > 0 || num_train_epochs() > 0,
          "set max_steps or num_train_epochs to a positive number");
  require(warmup_ratio() >= 0 && warmup_ratio() <= 1, "warmup_ratio must be in [0, 1]");
  require(warmup_steps() >= 0, "warmup_steps must not be negative");
  require(logging_steps() >= 0, "logging_steps must not be negative");
  require(logging_strategy() != IntervalStrategy::kSteps || logging_steps() > 0,
          "logging_strategy steps requires a positive logging_steps");
  require(!eval_steps() || *eval_steps() > 0, "eval_steps must be positive");
  // Hugging Face's fallback: eval_steps defaults to logging_steps.
  require(eval_strategy() != IntervalStrategy::kSteps || eval_steps() || logging_steps() > 0,
          "eval_strategy steps requires a positive eval_steps or logging_steps");
  require(save_strategy() != IntervalStrategy::kSteps || save_steps() > 0,
          "save_steps must be positive with save_strategy steps");
  require(!save_total_limit() || *save_total_limit() > 0, "save_total_limit must be positive");
  require(!(bf16() && fp16()), "bf16 and fp16 are both set; choose one");
  require(dataloader_num_workers() >= 0, "dataloader_num_workers must not be negative");
  require(!output_dir().empty(), "output_dir must not be empty");
  require(!metric_for_best_model() || !metric_for_best_model()->empty(),
          "metric_for_best_model must not be empty");
  if (load_best_model_at_end()) {
    // Hugging Face's rule: the best evaluation must have a checkpoint to load.
    require(eval_strategy() == save_strategy(),
            std::string("load_best_model_at_end requires the save and eval strategy to match, "
                        "but found eval_strategy ") +
                to_string(eval_strategy()) + " and save_strategy " + to_string(save_strategy()));
    const int64_t eval_every = eval_steps().value_or(logging_steps());
    require(eval_strategy() != IntervalStrategy::kSteps || save_steps() % eval_every == 0,
            "load_best_model_at_end requires save_steps to be a round multiple of eval_steps, "
            "but found save_steps " +
                std::to_string(save_steps()) + " and eval_steps " + std::to_string(eval_every));
  }
  lr_scheduler_kwargs().check_applies_to(lr_scheduler_type());
  require(lr_scheduler_type() != SchedulerType::kReduceLROnPlateau ||
              eval_strategy() != IntervalStrategy::kNo,
          "lr_scheduler_type reduce_lr_on_plateau needs an eval_strategy (it steps on eval_loss)");
  for (const auto& [key, value] : parse_optim_args(optim_args())) {
    const bool sgd_key = key == "momentum" || key == "dampening" || key == "nesterov";
    require(optim() == OptimizerName::kSgd && sgd_key,
            "optim_args '" + key + "' does not apply to optim " + to_string(optim()) +
                " (sgd takes momentum, dampening, nesterov; the others take none)");
  }
}

}  // namespace accelerate
