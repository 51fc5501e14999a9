// What the Trainer reports while it runs, and how a callback steers it
// (Hugging Face's TrainerState, TrainerControl and TrainerCallback):
// subclass TrainerCallback and pass it to Trainer::add_callback to see logs,
// evaluations and saves as they happen, or to stop training, force an
// evaluation, a save or a log by setting TrainerControl's flags.
// Callbacks run on every process and must decide the same on each: the
// Trainer's logging, evaluation and saving are collective.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace accelerate {

struct TrainingArguments;

// Named numbers: {"loss": 2.31, "learning_rate": 0.0003, "epoch": 0.5}.
using Metrics = std::map<std::string, double>;

struct TrainerState {
  int64_t global_step = 0;  // optimizer steps taken
  int64_t max_steps = 0;    // the run's length in optimizer steps
  int64_t steps_per_epoch = 0;
  double epoch = 0;  // fractional: 1.5 is half-way through the second epoch
  // logging_steps, eval_steps and save_steps in optimizer steps, fractions
  // of the run resolved against max_steps when training starts (0: unset).
  int64_t logging_steps = 0;
  int64_t eval_steps = 0;
  int64_t save_steps = 0;
  // Every log and evaluation so far, each with "step".
  std::vector<Metrics> log_history;
  // With metric_for_best_model: its best value so far, the step of that
  // evaluation, and the checkpoint saved at that step (once one is).
  std::optional<double> best_metric;
  std::optional<int64_t> best_global_step;
  std::optional<std::string> best_model_checkpoint;
};

// Hugging Face's TrainerControl. The Trainer sets the flags its arguments
// call for (logging_steps, eval/save strategies, max_steps) before the
// callbacks see an event, so a callback may add or cancel them; the Trainer
// acts on them and clears each once done (should_log by on_log,
// should_evaluate by on_evaluate, should_save by on_save, the three at
// on_step_begin, should_epoch_stop at on_epoch_begin, should_training_stop
// at on_train_begin).
struct TrainerControl {
  bool should_training_stop = false;  // end training after this step
  bool should_epoch_stop = false;     // end this epoch after this step
  bool should_save = false;           // save a checkpoint now
  bool should_evaluate = false;       // evaluate now
  bool should_log = false;            // log the training loss now
};

// Hugging Face's events, each with the arguments, the state and the control
// flags. The older observe-only forms (state, and logs/metrics/checkpoint)
// stay: the default of each new form calls them, so callbacks written for
// them keep working.
class TrainerCallback {
 public:
  virtual ~TrainerCallback() = default;

  // Once, when the callback is added to a constructed Trainer.
  virtual void on_init_end(const TrainingArguments& /*args*/, const TrainerState& /*state*/,
                           TrainerControl& /*control*/) {}
  virtual void on_train_begin(const TrainingArguments& /*args*/, const TrainerState& state,
                              TrainerControl& /*control*/) {
    on_train_begin(state);
  }
  virtual void on_train_end(const TrainingArguments& /*args*/, const TrainerState& state,
                            TrainerControl& /*control*/) {
    on_train_end(state);
  }
  virtual void on_epoch_begin(const TrainingArguments& /*args*/, const TrainerState& /*state*/,
                              TrainerControl& /*control*/) {}
  virtual void on_epoch_end(const TrainingArguments& /*args*/, const TrainerState& /*state*/,
                            TrainerControl& /*control*/) {}
  // Before the first micro-batch of each optimizer step.
  virtual void on_step_begin(const TrainingArguments& /*args*/, const TrainerState& /*state*/,
                             TrainerControl& /*control*/) {}
  // After each optimizer step.
  virtual void on_step_end(const TrainingArguments& /*args*/, const TrainerState& state,
                           TrainerControl& /*control*/) {
    on_step_end(state);
  }
  virtual void on_evaluate(const TrainingArguments& /*args*/, const TrainerState& state,
                           TrainerControl& /*control*/, const Metrics& metrics) {
    on_evaluate(state, metrics);
  }
  // After a checkpoint folder is complete (and old ones rotated out).
  virtual void on_save(const TrainingArguments& /*args*/, const TrainerState& state,
                       TrainerControl& /*control*/, const std::string& checkpoint) {
    on_save(state, checkpoint);
  }
  virtual void on_log(const TrainingArguments& /*args*/, const TrainerState& state,
                      TrainerControl& /*control*/, const Metrics& logs) {
    on_log(state, logs);
  }
  // After each batch of an evaluation or a prediction (evaluate, predict).
  virtual void on_prediction_step(const TrainingArguments& /*args*/, const TrainerState& /*state*/,
                                  TrainerControl& /*control*/) {}
  // After predict(), with its "test_" metrics.
  virtual void on_predict(const TrainingArguments& /*args*/, const TrainerState& /*state*/,
                          TrainerControl& /*control*/, const Metrics& /*metrics*/) {}

  // The observe-only forms.
  virtual void on_train_begin(const TrainerState& /*state*/) {}
  virtual void on_step_end(const TrainerState& /*state*/) {}
  // Training loss, grad norm and learning rate every logging_steps.
  virtual void on_log(const TrainerState& /*state*/, const Metrics& /*logs*/) {}
  virtual void on_evaluate(const TrainerState& /*state*/, const Metrics& /*metrics*/) {}
  virtual void on_save(const TrainerState& /*state*/, const std::string& /*checkpoint*/) {}
  virtual void on_train_end(const TrainerState& /*state*/) {}
};

// Hugging Face's EarlyStoppingCallback: stops training once
// metric_for_best_model has not improved on the best so far (by more than
// early_stopping_threshold) for early_stopping_patience evaluations in a
// row. Needs metric_for_best_model and an eval_strategy other than "no"
// (a one-line ConfigError at on_train_begin otherwise).
class EarlyStoppingCallback : public TrainerCallback {
 public:
  explicit EarlyStoppingCallback(int early_stopping_patience = 1,
                                 double early_stopping_threshold = 0.0);

  void on_train_begin(const TrainingArguments& args, const TrainerState& state,
                      TrainerControl& control) override;
  void on_evaluate(const TrainingArguments& args, const TrainerState& state,
                   TrainerControl& control, const Metrics& metrics) override;

  // Evaluations in a row without improvement.
  int patience_counter() const { return patience_counter_; }

 private:
  int patience_;
  double threshold_;
  int patience_counter_ = 0;
};

}  // namespace accelerate
