// torch's ReduceLROnPlateau for C++ programs (Hugging Face's
// lr_scheduler_type "reduce_lr_on_plateau"): each step(metric) compares an
// evaluation metric with the best so far; after more than `patience`
// evaluations without improvement (beyond `threshold`) every group's rate
// is multiplied by `factor` (not below min_lr; a change under eps is
// skipped), then `cooldown` evaluations are ignored.
//
//   accelerate::ReduceLROnPlateau plateau(optimizer, accelerate::LrSchedulerKwargs().patience(2));
//   ... plateau.step(eval_loss);
//
// accelerate::Trainer steps it after each evaluation with eval_loss, and
// checkpoints keep its state (save/load, for register_for_checkpointing).
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <cstdint>

#include "accelerate/schedule/lr_schedule.h"

namespace accelerate {

class ReduceLROnPlateau {
 public:
  // Takes mode, factor, patience, threshold, threshold_mode, cooldown,
  // min_lr and eps from `kwargs` (torch's defaults otherwise); throws
  // ConfigError for a factor >= 1, an unknown mode or threshold_mode, or a
  // parameter of another schedule.
  ReduceLROnPlateau(torch::optim::Optimizer& optimizer, const LrSchedulerKwargs& kwargs = {});

  void step(double metric);

  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  int64_t last_epoch() const { return last_epoch_; }

  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

 private:
  bool is_better(double value) const;

  torch::optim::Optimizer& optimizer_;
  bool maximize_ = false;
  bool relative_ = true;
  double factor_, threshold_, min_lr_, eps_;
  int64_t patience_, cooldown_;
  double best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
};

}  // namespace accelerate
