#include "accelerate/schedule/reduce_lr_on_plateau.h"

#include <algorithm>
#include <limits>
#include <string>

#include "accelerate/common/errors.h"

namespace accelerate {

ReduceLROnPlateau::ReduceLROnPlateau(torch::optim::Optimizer& optimizer,
                                     const LrSchedulerKwargs& kwargs)
    : optimizer_(optimizer),
      factor_(kwargs.factor().value_or(0.1)),
      threshold_(kwargs.threshold().value_or(1e-4)),
      min_lr_(kwargs.min_lr().value_or(0.0)),
      eps_(kwargs.eps().value_or(1e-8)),
      patience_(kwargs.patience().value_or(10)),
      cooldown_(kwargs.cooldown().value_or(0)) {
  kwargs.check_applies_to(SchedulerType::kReduceLROnPlateau);
  const auto refuse = [](const std::string& problem) {
    throw ConfigError("reduce_lr_on_plateau: " + problem);
  };
  if (!(factor_ < 1.0)) refuse("factor must be below 1 (got " + std::to_string(factor_) + ")");
  const std::string mode = kwargs.mode().value_or("min");
  if (mode != "min" && mode != "max") refuse("mode '" + mode + "' is not min or max");
  const std::string threshold_mode = kwargs.threshold_mode().value_or("rel");
  if (threshold_mode != "rel" && threshold_mode != "abs") {
    refuse("threshold_mode '" + threshold_mode + "' is not rel or abs");
  }
  if (patience_ < 0 || cooldown_ < 0) refuse("patience and cooldown must not be negative");
  maximize_ = mode == "max";
  relative_ = threshold_mode == "rel";
  best_ = maximize_ ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
}

bool ReduceLROnPlateau::is_better(double value) const {
  if (!maximize_)
    return relative_ ? value < best_ * (1.0 - threshold_) : value < best_ - threshold_;
  return relative_ ? value > best_ * (threshold_ + 1.0) : value > best_ + threshold_;
}

// torch's order: compare, then the cooldown, then the reduction.
void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // evaluations in the cooldown do not count
  }
  if (num_bad_epochs_ > patience_) {
    for (auto& group : optimizer_.param_groups()) {
      const double old_lr = group.options().get_lr();
      const double new_lr = std::max(old_lr * factor_, min_lr_);
      if (old_lr - new_lr > eps_) group.options().set_lr(new_lr);
    }
    cooldown_counter_ = cooldown_;
    num_bad_epochs_ = 0;
  }
}

void ReduceLROnPlateau::save(torch::serialize::OutputArchive& archive) const {
  archive.write("best", at::full({1}, best_, at::kDouble));
  archive.write("num_bad_epochs", at::full({1}, num_bad_epochs_, at::kLong));
  archive.write("cooldown_counter", at::full({1}, cooldown_counter_, at::kLong));
  archive.write("last_epoch", at::full({1}, last_epoch_, at::kLong));
}

void ReduceLROnPlateau::load(torch::serialize::InputArchive& archive) {
  at::Tensor best, bad, cooldown, epoch;
  archive.read("best", best);
  archive.read("num_bad_epochs", bad);
  archive.read("cooldown_counter", cooldown);
  archive.read("last_epoch", epoch);
  best_ = best.item<double>();
  num_bad_epochs_ = bad.item<int64_t>();
  cooldown_counter_ = cooldown.item<int64_t>();
  last_epoch_ = epoch.item<int64_t>();
}

}  // namespace accelerate
