// Hugging Face's learning-rate schedules (transformers.get_scheduler) as a
// LibTorch scheduler: warm up linearly from 0 to each group's learning rate
// over num_warmup_steps, then hold it (constant_with_warmup), decay it
// linearly to 0 at num_training_steps (linear), follow half a cosine to 0
// (cosine), num_cycles cosines with hard restarts (cosine_with_restarts),
// a polynomial to lr_end (polynomial), 1/sqrt(step) (inverse_sqrt), or
// warm up, hold and decay (warmup_stable_decay). "constant" holds it from
// the start. reduce_lr_on_plateau is driven by an evaluation metric instead
// (accelerate/schedule/reduce_lr_on_plateau.h); this scheduler then holds the rates.
// Each schedule's extra parameters (Hugging Face's lr_scheduler_kwargs) are
// in LrSchedulerKwargs.
//
//   accelerate::Scheduler<accelerate::WarmupSchedule> scheduler(
//       optimizer, accelerate::SchedulerType::kLinear, /*num_warmup_steps=*/100,
//       /*num_training_steps=*/10000);
//   ... optimizer.step(); scheduler.step();
//
// As with Python's LambdaLR, construction sets the rates of step 0 and the
// k-th step() call sets those of step k. Wrapped in accelerate::Scheduler,
// it advances only on real optimizer steps and is saved by save_state.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "accelerate/common/arg.h"

namespace accelerate {

enum class SchedulerType {
  kLinear,
  kCosine,
  kConstant,
  kConstantWithWarmup,
  kCosineWithRestarts,
  kPolynomial,
  kInverseSqrt,
  kReduceLROnPlateau,
  kWarmupStableDecay
};

// Hugging Face's lr_scheduler_type names: "linear", "cosine", "constant",
// "constant_with_warmup", "cosine_with_restarts", "polynomial",
// "inverse_sqrt", "reduce_lr_on_plateau", "warmup_stable_decay"; nullopt
// for anything else.
std::optional<SchedulerType> parse_scheduler_type(std::string_view text);
const char* to_string(SchedulerType type);
// The valid names, comma-separated (for error messages).
std::string scheduler_type_names();

// warmup_stable_decay's warm-up and decay shapes: "linear", "cosine", "1-sqrt".
enum class WsdShape { kLinear, kCosine, kOneMinusSqrt };
std::optional<WsdShape> parse_wsd_shape(std::string_view text);
const char* to_string(WsdShape shape);

// Hugging Face's lr_scheduler_kwargs: each schedule's extra parameters.
// Unset ones take transformers' defaults (below); setting one the chosen
// schedule does not take is a ConfigError, as transformers' TypeError.
struct LrSchedulerKwargs {
  // cosine (0.5: half a cosine), cosine_with_restarts (1), warmup_stable_decay (0.5).
  ACCELERATE_ARG(std::optional<double>, num_cycles);
  // polynomial: the rate reached at num_training_steps (1e-7) and the power (1.0).
  ACCELERATE_ARG(std::optional<double>, lr_end);
  ACCELERATE_ARG(std::optional<double>, power);
  // inverse_sqrt: default num_warmup_steps, or 10000 without warm-up.
  ACCELERATE_ARG(std::optional<int64_t>, timescale);
  // warmup_stable_decay: num_decay_steps is required; num_stable_steps
  // defaults to num_training_steps - num_warmup_steps - num_decay_steps;
  // warm-up "linear", decay "cosine"; min_lr_ratio 0.
  ACCELERATE_ARG(std::optional<int64_t>, num_stable_steps);
  ACCELERATE_ARG(std::optional<int64_t>, num_decay_steps);
  ACCELERATE_ARG(std::optional<WsdShape>, warmup_type);
  ACCELERATE_ARG(std::optional<WsdShape>, decay_type);
  ACCELERATE_ARG(std::optional<double>, min_lr_ratio);
  // reduce_lr_on_plateau (torch's ReduceLROnPlateau): mode "min", factor
  // 0.1, patience 10, threshold 1e-4, threshold_mode "rel", cooldown 0,
  // min_lr 0, eps 1e-8.
  ACCELERATE_ARG(std::optional<std::string>, mode);
  ACCELERATE_ARG(std::optional<double>, factor);
  ACCELERATE_ARG(std::optional<int64_t>, patience);
  ACCELERATE_ARG(std::optional<double>, threshold);
  ACCELERATE_ARG(std::optional<std::string>, threshold_mode);
  ACCELERATE_ARG(std::optional<int64_t>, cooldown);
  ACCELERATE_ARG(std::optional<double>, min_lr);
  ACCELERATE_ARG(std::optional<double>, eps);

 public:
  // The names of the parameters that are set, in declaration order.
  std::vector<std::string> set_names() const;
  // Throws ConfigError naming the first parameter `type` does not take.
  void check_applies_to(SchedulerType type) const;
};

// From Hugging Face's command-line form, a JSON object of numbers and
// strings: {"num_cycles": 2, "decay_type": "linear"}. "" or "{}": none.
// Throws ConfigError (one line) on an unknown key or a malformed value.
LrSchedulerKwargs parse_lr_scheduler_kwargs(std::string_view json);

// The factor on the base learning rate at `step` (Hugging Face's lambdas).
// `lr_init` (the optimizer's default rate) matters for polynomial only,
// whose lambda is relative to it. reduce_lr_on_plateau: 1.
double schedule_factor(SchedulerType type, int64_t step, int64_t num_warmup_steps,
                       int64_t num_training_steps, const LrSchedulerKwargs& kwargs = {},
                       double lr_init = 1.0);

class WarmupSchedule : public torch::optim::LRScheduler {
 public:
  // Throws accelerate::ConfigError for negative step counts, a decaying
  // schedule with num_training_steps 0, or kwargs the schedule does not take
  // or refuses (polynomial's lr_end not below the rate, ...).
  WarmupSchedule(torch::optim::Optimizer& optimizer, SchedulerType type, int64_t num_warmup_steps,
                 int64_t num_training_steps, LrSchedulerKwargs kwargs = {});

  // The rates of the groups at step 0 (their rates when constructed).
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // Steps taken so far (the k of the last step() call).
  int64_t steps() const { return static_cast<int64_t>(step_count_); }

 private:
  std::vector<double> get_lrs() override;
  std::vector<double> rates_at(int64_t step) const;

  SchedulerType type_;
  int64_t num_warmup_steps_, num_training_steps_;
  LrSchedulerKwargs kwargs_;
  double lr_init_;  // the optimizer's default rate (polynomial's lambda needs it)
  std::vector<double> base_lrs_;
  torch::optim::Optimizer& optimizer_;
};

}  // namespace accelerate
