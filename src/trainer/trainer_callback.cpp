#include "accelerate/trainer/trainer_callback.h"

#include <cmath>
#include <iostream>

#include "accelerate/common/errors.h"
#include "accelerate/trainer/training_arguments.h"

namespace accelerate {

EarlyStoppingCallback::EarlyStoppingCallback(int early_stopping_patience,
                                             double early_stopping_threshold)
    : patience_(early_stopping_patience), threshold_(early_stopping_threshold) {
  if (patience_ < 1)
    throw ConfigError("EarlyStoppingCallback: early_stopping_patience must be >= 1");
  if (threshold_ < 0) {
    throw ConfigError("EarlyStoppingCallback: early_stopping_threshold must not be negative");
  }
}

void EarlyStoppingCallback::on_train_begin(const TrainingArguments& args,
                                           const TrainerState& /*state*/,
                                           TrainerControl& /*control*/) {
  if (!args.best_metric_key()) {
    throw ConfigError(
        "EarlyStoppingCallback requires metric_for_best_model (or load_best_model_at_end)");
  }
  if (args.eval_strategy() == IntervalStrategy::kNo) {
    throw ConfigError("EarlyStoppingCallback requires an eval_strategy of steps or epoch");
  }
  patience_counter_ = 0;
}

void EarlyStoppingCallback::on_evaluate(const TrainingArguments& args, const TrainerState& state,
                                        TrainerControl& control, const Metrics& metrics) {
  const auto key = args.best_metric_key();
  const auto found = key ? metrics.find(*key) : metrics.end();
  if (found == metrics.end()) {
    std::cerr << "accelerate: warning: early stopping needs " << key.value_or("a metric")
              << ", which the evaluation did not report: it does not stop this run\n";
    return;
  }
  // The Trainer ranks this evaluation after on_evaluate, so best_metric is
  // the best of the earlier ones.
  const double value = found->second;
  const bool improved =
      !state.best_metric || ((args.best_metric_greater_is_better() ? value > *state.best_metric
                                                                   : value < *state.best_metric) &&
                             std::abs(value - *state.best_metric) > threshold_);
  patience_counter_ = improved ? 0 : patience_counter_ + 1;
  if (patience_counter_ >= patience_) control.should_training_stop = true;
}

}  // namespace accelerate
