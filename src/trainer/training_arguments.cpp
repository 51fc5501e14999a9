#include "accelerate/trainer/training_arguments.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/detail/enum_names.h"
#include "tracking/text_format.h"

namespace accelerate {

namespace {

// Transformers' IntervalStrategy values, matched exactly.
constexpr detail::EnumName<IntervalStrategy> kIntervalStrategyNames[] = {
    {IntervalStrategy::kNo, "no"},
    {IntervalStrategy::kSteps, "steps"},
    {IntervalStrategy::kEpoch, "epoch"}};
static_assert(detail::names_are_distinct(kIntervalStrategyNames));

// Transformers' SaveStrategy values, matched exactly.
constexpr detail::EnumName<SaveStrategy> kSaveStrategyNames[] = {{SaveStrategy::kNo, "no"},
                                                                 {SaveStrategy::kSteps, "steps"},
                                                                 {SaveStrategy::kEpoch, "epoch"},
                                                                 {SaveStrategy::kBest, "best"}};
static_assert(detail::names_are_distinct(kSaveStrategyNames));

// 2.5 as "2.5", 500 as "500": the value as the user wrote it.
std::string number_text(double value) {
  if (value == std::floor(value) && std::abs(value) < 1e15) {
    return std::to_string(static_cast<int64_t>(value));
  }
  return tracking::shortest_double(value);
}

// Transformers' OptimizerNames values this Trainer has, matched exactly.
constexpr detail::EnumName<OptimizerName> kOptimizerNames[] = {
    {OptimizerName::kAdamWTorch, "adamw_torch"},
    {OptimizerName::kAdamWTorchFused, "adamw_torch_fused"},
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

std::optional<SaveStrategy> parse_save_strategy(const std::string& text) {
  return detail::parse_enum(kSaveStrategyNames, text, detail::NameCase::kExact);
}

const char* to_string(SaveStrategy strategy) {
  return detail::enum_name(kSaveStrategyNames, strategy, "?");
}

int64_t steps_in_run(double steps, int64_t max_steps) {
  if (steps < 1) return static_cast<int64_t>(std::ceil(static_cast<double>(max_steps) * steps));
  return static_cast<int64_t>(steps);
}

namespace {
// The save strategy of an interval strategy's name.
SaveStrategy save_strategy_named_as(IntervalStrategy strategy) {
  switch (strategy) {
    case IntervalStrategy::kNo:
      return SaveStrategy::kNo;
    case IntervalStrategy::kSteps:
      return SaveStrategy::kSteps;
    case IntervalStrategy::kEpoch:
      return SaveStrategy::kEpoch;
  }
  return SaveStrategy::kNo;
}
}  // namespace

TrainingArguments& TrainingArguments::save_strategy(IntervalStrategy strategy) {
  return save_strategy(save_strategy_named_as(strategy));
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
  require(save_strategy() != SaveStrategy::kSteps || save_steps() > 0,
          "save_steps must be positive with save_strategy steps");
  // Hugging Face's rule, checked where the strategy uses the value: above 1
  // a step count must be whole (below 1 it is a fraction of the run).
  const auto whole_above_one = [&](bool used, const char* name, double steps) {
    require(!used || steps <= 1 || steps == std::floor(steps),
            std::string(name) + " must be a whole number when above 1 (below 1 it is a fraction " +
                "of the run's steps), but found " + number_text(steps));
  };
  whole_above_one(logging_strategy() == IntervalStrategy::kSteps, "logging_steps", logging_steps());
  whole_above_one(eval_strategy() == IntervalStrategy::kSteps, "eval_steps",
                  eval_steps_or_logging());
  whole_above_one(save_strategy() == SaveStrategy::kSteps, "save_steps", save_steps());
  require(!save_total_limit() || *save_total_limit() > 0, "save_total_limit must be positive");
  require(!(bf16() && fp16()), "bf16 and fp16 are both set; choose one");
  require(dataloader_num_workers() >= 0, "dataloader_num_workers must not be negative");
  require(!output_dir().empty(), "output_dir must not be empty");
  require(!metric_for_best_model() || !metric_for_best_model()->empty(),
          "metric_for_best_model must not be empty");
  // transformers' Trainer refuses it too: "best" needs a metric to rank by
  // (load_best_model_at_end supplies its default "loss").
  require(save_strategy() != SaveStrategy::kBest || best_metric_key(),
          "save_strategy best requires metric_for_best_model (or load_best_model_at_end, whose "
          "default is loss)");
  if (load_best_model_at_end() && save_strategy() != SaveStrategy::kBest) {
    // Hugging Face's rule: the best evaluation must have a checkpoint to load
    // ("best" saves exactly the best evaluations).
    require(save_strategy_named_as(eval_strategy()) == save_strategy(),
            std::string("load_best_model_at_end requires the save and eval strategy to "
                        "match, except when save_strategy is best, but found "
                        "eval_strategy ") +
                to_string(eval_strategy()) + " and save_strategy " + to_string(save_strategy()));
    if (eval_strategy() == IntervalStrategy::kSteps) check_best_model_steps();
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

void TrainingArguments::check_best_model_steps() const {
  // Hugging Face's test, float remainders included: fractions and steps
  // cannot be compared before the run's length is known, and two fractions
  // are compared scaled by a million.
  const double eval_every = eval_steps_or_logging(), save_every = save_steps();
  if (std::fmod(save_every, eval_every) == 0) return;
  const std::string found = number_text(save_every) + " and eval_steps " + number_text(eval_every);
  if (eval_every >= 1 && save_every >= 1) {
    throw ConfigError(
        "TrainingArguments: load_best_model_at_end requires save_steps to be a round multiple of "
        "eval_steps, but found save_steps " +
        found);
  }
  if (eval_every >= 1 || save_every >= 1) {
    throw ConfigError(
        "TrainingArguments: load_best_model_at_end cannot check that save_steps is a multiple of "
        "eval_steps when one is a fraction of the run and the other is not: save_steps " +
        found);
  }
  constexpr double kMillion = 1e6;
  if (std::fmod(save_every * kMillion, eval_every * kMillion) != 0) {
    throw ConfigError(
        "TrainingArguments: load_best_model_at_end requires save_steps to be a multiple of "
        "eval_steps, but found save_steps " +
        found);
  }
}

}  // namespace accelerate
