// What the Trainer reports while it runs (Hugging Face's TrainerState and
// TrainerCallback): subclass TrainerCallback and pass it to
// Trainer::add_callback to see logs, evaluations and saves as they happen.
// Callbacks run on every process; check JobState or the Accelerator for the
// main one before printing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace accelerate {

// Named numbers: {"loss": 2.31, "learning_rate": 0.0003, "epoch": 0.5}.
using Metrics = std::map<std::string, double>;

struct TrainerState {
  int64_t global_step = 0;  // optimizer steps taken
  int64_t max_steps = 0;    // the run's length in optimizer steps
  int64_t steps_per_epoch = 0;
  double epoch = 0;  // fractional: 1.5 is half-way through the second epoch
  // Every log and evaluation so far, each with "step".
  std::vector<Metrics> log_history;
};

class TrainerCallback {
 public:
  virtual ~TrainerCallback() = default;
  virtual void on_train_begin(const TrainerState& /*state*/) {}
  // After each optimizer step.
  virtual void on_step_end(const TrainerState& /*state*/) {}
  // Training loss, grad norm and learning rate every logging_steps.
  virtual void on_log(const TrainerState& /*state*/, const Metrics& /*logs*/) {}
  virtual void on_evaluate(const TrainerState& /*state*/, const Metrics& /*metrics*/) {}
  // After a checkpoint folder is complete.
  virtual void on_save(const TrainerState& /*state*/, const std::string& /*checkpoint*/) {}
  virtual void on_train_end(const TrainerState& /*state*/) {}
};

}  // namespace accelerate
