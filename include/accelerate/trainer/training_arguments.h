// Hugging Face transformers' TrainingArguments, the part LLM training
// scripts use, with its names and defaults: what accelerate::Trainer
// (trainer.h) turns into a training run. Processes, mixed precision from
// the launch and ZeRO come from `accelerate launch` as for any Accelerator;
// bf16/fp16 here ask for mixed precision like the Trainer's flags do.
//
//   auto args = accelerate::TrainingArguments()
//                   .output_dir("runs/gpt")
//                   .per_device_train_batch_size(16)
//                   .learning_rate(6e-4)
//                   .lr_scheduler_type(accelerate::SchedulerType::kCosine)
//                   .warmup_steps(100)
//                   .max_steps(2000)
//                   .eval_strategy(accelerate::IntervalStrategy::kSteps)
//                   .eval_steps(200);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "accelerate/common/arg.h"
#include "accelerate/schedule/lr_schedule.h"

namespace accelerate {

// When to evaluate or save: never, every eval_steps/save_steps optimizer
// steps, or at the end of every epoch ("no", "steps", "epoch").
enum class IntervalStrategy { kNo, kSteps, kEpoch };
std::optional<IntervalStrategy> parse_interval_strategy(const std::string& text);
const char* to_string(IntervalStrategy strategy);

// When to save checkpoints (transformers' SaveStrategy): the interval
// strategies, or "best": whenever an evaluation during training reaches a
// new best metric_for_best_model (which must then be set).
enum class SaveStrategy { kNo, kSteps, kEpoch, kBest };
std::optional<SaveStrategy> parse_save_strategy(const std::string& text);
const char* to_string(SaveStrategy strategy);

// transformers' TrainerState.compute_steps: logging_steps, eval_steps and
// save_steps below 1 are a fraction of the run, ceil(max_steps * steps);
// whole numbers from 1 up are steps.
int64_t steps_in_run(double steps, int64_t max_steps);

// The Trainer's optimizer, by Hugging Face's `optim` names: "adamw_torch"
// (torch's AdamW with adam_beta1/2, adam_epsilon), "adamw_torch_fused" (the
// same update by accelerate::FusedAdamW, fused_adamw.h; transformers'
// default on torch >= 2.8, and this Trainer's), "sgd" (torch's SGD;
// momentum, dampening and nesterov from optim_args) and "adafactor"
// (transformers' Adafactor with lr = learning_rate, scale_parameter and
// relative_step off). Every one takes weight_decay on the decayed group.
enum class OptimizerName { kAdamWTorch, kAdamWTorchFused, kSgd, kAdafactor };
std::optional<OptimizerName> parse_optimizer_name(const std::string& text);
// As parse_optimizer_name, but an unknown name is a ConfigError listing the valid ones.
OptimizerName require_optimizer_name(const std::string& text);
const char* to_string(OptimizerName name);

// optim_args: Hugging Face's "key=value,key=value" string, as a map.
// Throws ConfigError for an entry without '='.
std::vector<std::pair<std::string, std::string>> parse_optim_args(const std::string& text);

struct TrainingArguments {
  // Checkpoints go to {output_dir}/checkpoint-{global step}; save_model's
  // default folder.
  ACCELERATE_ARG(std::string, output_dir) = "trainer_output";
  ACCELERATE_ARG(int64_t, per_device_train_batch_size) = 8;
  ACCELERATE_ARG(int64_t, per_device_eval_batch_size) = 8;
  ACCELERATE_ARG(int, gradient_accumulation_steps) = 1;
  // AdamW's settings. Biases and LayerNorm weights are not decayed.
  ACCELERATE_ARG(double, learning_rate) = 5e-5;
  ACCELERATE_ARG(double, weight_decay) = 0.0;
  ACCELERATE_ARG(double, adam_beta1) = 0.9;
  ACCELERATE_ARG(double, adam_beta2) = 0.999;
  ACCELERATE_ARG(double, adam_epsilon) = 1e-8;
  // Clip the global gradient norm to this before each step; 0: no clipping.
  ACCELERATE_ARG(double, max_grad_norm) = 1.0;
  // The run's length: num_train_epochs, unless max_steps > 0 (optimizer steps).
  ACCELERATE_ARG(double, num_train_epochs) = 3.0;
  ACCELERATE_ARG(int64_t, max_steps) = -1;
  ACCELERATE_ARG(SchedulerType, lr_scheduler_type) = SchedulerType::kLinear;
  // Warm-up steps: warmup_steps when > 0, else ceil(warmup_ratio * steps).
  ACCELERATE_ARG(double, warmup_ratio) = 0.0;
  ACCELERATE_ARG(int64_t, warmup_steps) = 0;
  // When to log the mean training loss, grad norm and learning rate (main
  // process; trackers in report_to): never, every logging_steps optimizer
  // steps, or at the end of every epoch.
  ACCELERATE_ARG(IntervalStrategy, logging_strategy) = IntervalStrategy::kSteps;
  // Steps (whole numbers), or below 1 a fraction of the run's optimizer
  // steps (steps_in_run), as for eval_steps and save_steps.
  ACCELERATE_ARG(double, logging_steps) = 500;
  // Also log after the first optimizer step, whatever the strategy.
  ACCELERATE_ARG(bool, logging_first_step) = false;
  // A NaN or infinite micro-batch loss counts in the logged training loss as
  // the mean since the last log, and non-finite batch losses are left out of
  // the evaluation loss (unless every one is). Training itself is unchanged.
  ACCELERATE_ARG(bool, logging_nan_inf_filter) = true;
  ACCELERATE_ARG(IntervalStrategy, eval_strategy) = IntervalStrategy::kNo;
  ACCELERATE_ARG(std::optional<double>, eval_steps);  // nullopt: logging_steps
  // No evaluation before this many optimizer steps (eval_strategy steps) or
  // epochs (eval_strategy epoch) have passed.
  ACCELERATE_ARG(double, eval_delay) = 0;
  // With "steps", the last step is saved (and evaluated) too when it is not a
  // multiple of save_steps (eval_steps), as Hugging Face's Trainer does.
  ACCELERATE_ARG(SaveStrategy, save_strategy) = SaveStrategy::kSteps;
  ACCELERATE_ARG(double, save_steps) = 500;
  // Checkpoints hold the model's weights (model.safetensors) and
  // trainer_state.json only: no optimizer, schedule, random or data state,
  // so they cannot be resumed from (train() refuses them).
  ACCELERATE_ARG(bool, save_only_model) = false;
  // Keep at most this many checkpoints in output_dir (the oldest go first).
  ACCELERATE_ARG(std::optional<int>, save_total_limit);
  // A checkpoint folder to continue from exactly, or "latest" (the newest
  // in output_dir; nothing there starts afresh).
  ACCELERATE_ARG(std::optional<std::string>, resume_from_checkpoint);
  ACCELERATE_ARG(uint64_t, seed) = 42;
  ACCELERATE_ARG(bool, bf16) = false;
  ACCELERATE_ARG(bool, fp16) = false;
  // Passed to the program's model by the caller (Trainer cannot reach into
  // an arbitrary model); see docs/trainer.md.
  ACCELERATE_ARG(bool, gradient_checkpointing) = false;
  // Trackers: "tensorboard", "jsonl", "csv", "all" or "none".
  ACCELERATE_ARG(std::vector<std::string>, report_to) = {"none"};
  ACCELERATE_ARG(int64_t, dataloader_num_workers) = 0;
  // No progress bar (it is drawn on the local main process's terminal only).
  ACCELERATE_ARG(bool, disable_tqdm) = false;

  // ---- Optimizer and schedule choices (Hugging Face's names) ----
  ACCELERATE_ARG(OptimizerName, optim) = OptimizerName::kAdamWTorchFused;
  // Extra optimizer settings, "key=value,...": sgd takes momentum,
  // dampening and nesterov; the others take none.
  ACCELERATE_ARG(std::string, optim_args);
  // The chosen lr_scheduler_type's extra parameters (lr_schedule.h); a
  // parameter it does not take is refused. reduce_lr_on_plateau steps on
  // metric_for_best_model (default eval_loss) after each evaluation during
  // training, so it needs an eval_strategy; it ignores warm-up, as in
  // transformers.
  ACCELERATE_ARG(LrSchedulerKwargs, lr_scheduler_kwargs);

  // ---- Evaluation metrics and best-model selection (docs/trainer.md) ----
  // At the end of train(), load the weights of the checkpoint whose
  // evaluation scored best on metric_for_best_model. Needs save_strategy ==
  // eval_strategy (and save_steps a multiple of eval_steps), or "best".
  ACCELERATE_ARG(bool, load_best_model_at_end) = false;
  // The evaluation metric that ranks checkpoints, with or without its
  // "eval_" prefix; default "loss" when load_best_model_at_end. Setting it
  // also keeps the best checkpoint out of save_total_limit's rotation.
  ACCELERATE_ARG(std::optional<std::string>, metric_for_best_model);
  // Whether a larger metric is better; default: false when the metric's
  // name ends in "loss", else true.
  ACCELERATE_ARG(std::optional<bool>, greater_is_better);

 public:
  // The interval strategies name the save strategies of the same names (so
  // save_strategy(IntervalStrategy::kNo) reads as before SaveStrategy).
  TrainingArguments& save_strategy(IntervalStrategy strategy);
  // eval_steps, defaulting to logging_steps as in Hugging Face.
  double eval_steps_or_logging() const { return eval_steps().value_or(logging_steps()); }
  // The evaluation key metric_for_best_model names ("eval_loss"), with its
  // default applied; nullopt: no best-model tracking.
  std::optional<std::string> best_metric_key() const;
  // greater_is_better with its default applied.
  bool best_metric_greater_is_better() const;
  // ---- end of evaluation metrics and best-model selection ----

 public:
  // Throws ConfigError (one line naming the argument) for values Hugging
  // Face refuses: non-positive batch sizes or steps, bf16 with fp16, ...
  void validate() const;

 private:
  // load_best_model_at_end under "steps": save_steps a multiple of eval_steps.
  void check_best_model_steps() const;
};

}  // namespace accelerate
