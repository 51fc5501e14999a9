// TrainingArguments as command-line flags with Hugging Face's names, for the
// examples that train through accelerate::Trainer (examples/finetune). Each
// flag is declared here once; a program gives its own defaults by setting
// the struct's members before add_training_flags.
//
//   examples::TrainingFlags training;       // Hugging Face's defaults
//   training.logging_steps = 10;            // the program's own
//   examples::add_training_flags(flags, training);
//   flags.parse(argc, argv);
//   accelerate::TrainingArguments args = examples::training_arguments(training);
#pragma once

#include <accelerate/trainer/training_arguments.h>

#include <cstdint>
#include <string>
#include <vector>

#include "example_flags.h"

namespace examples {

// Defaults are TrainingArguments' (transformers'), except where a comment says.
struct TrainingFlags {
  std::string output_dir = "trainer_output";
  int64_t per_device_train_batch_size = 8;
  int64_t per_device_eval_batch_size = 8;
  int gradient_accumulation_steps = 1;
  double learning_rate = 5e-5;
  double weight_decay = 0.0;
  double max_grad_norm = 1.0;
  double num_train_epochs = 3.0;
  int64_t max_steps = -1;
  std::string lr_scheduler_type = "linear";
  std::string lr_scheduler_kwargs;  // JSON, as Hugging Face's flag
  std::string optim = "adamw_torch_fused";
  std::string optim_args;
  int64_t warmup_steps = 0;
  double warmup_ratio = 0.0;
  // Steps, or below 1 a fraction of the run (Hugging Face's floats).
  std::string logging_strategy = "steps";
  double logging_steps = 500;
  bool logging_first_step = false;
  std::string eval_strategy = "no";
  double eval_steps = 0;  // 0: logging_steps, as Hugging Face's None
  double eval_delay = 0;
  std::string save_strategy = "steps";
  double save_steps = 500;
  bool save_only_model = false;
  bool load_best_model_at_end = false;
  std::string metric_for_best_model;  // "": none (loss with load_best_model_at_end)
  std::string greater_is_better;      // "true", "false" or "": by the metric's name
  int64_t save_total_limit = 0;       // <= 0: keep every checkpoint
  std::string resume_from_checkpoint;
  uint64_t seed = 42;
  bool bf16 = false;
  bool gradient_checkpointing = false;
  bool fp16 = false;
  std::string report_to = "none";
  int64_t dataloader_num_workers = 0;
};

inline void add_training_flags(Flags& flags, TrainingFlags& f) {
  const std::vector<std::string> intervals{"no", "steps", "epoch"};
  flags
      .add("output_dir", &f.output_dir, "checkpoints (DIR/checkpoint-N) and the program's outputs",
           "DIR")
      .add("per_device_train_batch_size", &f.per_device_train_batch_size,
           "training batch per process")
      .add("per_device_eval_batch_size", &f.per_device_eval_batch_size,
           "evaluation batch per process")
      .add("gradient_accumulation_steps", &f.gradient_accumulation_steps,
           "batches per optimizer step")
      .add("learning_rate", &f.learning_rate, "the optimizer's peak learning rate")
      .add("weight_decay", &f.weight_decay, "AdamW's weight decay (not on biases and norms)")
      .add("max_grad_norm", &f.max_grad_norm, "clip the gradient norm to this; 0: no clipping")
      .add("num_train_epochs", &f.num_train_epochs, "the run's length, unless max_steps > 0")
      .add("max_steps", &f.max_steps, "the run's length in optimizer steps; <= 0: num_train_epochs")
      .add_choice("lr_scheduler_type", &f.lr_scheduler_type,
                  {"linear", "cosine", "constant", "constant_with_warmup", "cosine_with_restarts",
                   "polynomial", "inverse_sqrt", "reduce_lr_on_plateau", "warmup_stable_decay"},
                  "the learning rate schedule after the warm-up")
      .add("lr_scheduler_kwargs", &f.lr_scheduler_kwargs,
           "the schedule's extra parameters, e.g. {\"num_cycles\": 2}", "JSON")
      .add_choice("optim", &f.optim, {"adamw_torch_fused", "adamw_torch", "sgd", "adafactor"},
                  "the optimizer")
      .add("optim_args", &f.optim_args, "sgd's momentum, dampening, nesterov: key=value,...",
           "ARGS")
      .add("warmup_steps", &f.warmup_steps, "warm-up steps; 0: warmup_ratio of the steps")
      .add("warmup_ratio", &f.warmup_ratio, "warm-up as a fraction of the steps")
      .add_choice("logging_strategy", &f.logging_strategy, intervals,
                  "when to log loss, grad norm and learning rate")
      .add(
          "logging_steps", &f.logging_steps,
          "log loss, grad norm and learning rate every N steps (below 1: that fraction of the run)",
          "N")
      .add("logging_first_step", &f.logging_first_step, "also log after the first step")
      .add_choice("eval_strategy", &f.eval_strategy, intervals, "when to evaluate")
      .add("eval_steps", &f.eval_steps, "evaluate every N steps (eval_strategy steps); 0: logging",
           "N")
      .add("eval_delay", &f.eval_delay, "no evaluation before N steps or epochs (eval_strategy's)",
           "N")
      .add_choice("save_strategy", &f.save_strategy, {"no", "steps", "epoch", "best"},
                  "when to save a checkpoint (best: at each new best metric_for_best_model)")
      .add("save_steps", &f.save_steps, "save every N steps (save_strategy steps)", "N")
      .add("save_only_model", &f.save_only_model,
           "checkpoints hold the model's weights only (they cannot be resumed from)")
      .add("load_best_model_at_end", &f.load_best_model_at_end,
           "end with the weights of the best evaluated checkpoint")
      .add("metric_for_best_model", &f.metric_for_best_model,
           "the evaluation metric that ranks checkpoints (eval_loss, eval_accuracy, ...)", "NAME")
      .add_choice("greater_is_better", &f.greater_is_better, {"true", "false"},
                  "whether a larger metric is better (default: not for a loss)")
      .add("save_total_limit", &f.save_total_limit, "checkpoints to keep; <= 0: all", "N")
      .add("resume_from_checkpoint", &f.resume_from_checkpoint,
           "continue exactly from a checkpoint folder, or the newest in output_dir", "PATH|latest")
      .add("seed", &f.seed, "the seed of the data order (and of any new weights)")
      .add("bf16", &f.bf16, "bfloat16 mixed precision")
      .add("gradient_checkpointing", &f.gradient_checkpointing,
           "recompute each block's activations in backward (less memory, ~1/3 more compute)")
      .add("fp16", &f.fp16, "float16 mixed precision (with loss scaling)")
      .add_choice("report_to", &f.report_to, {"tensorboard", "jsonl", "csv", "all", "none"},
                  "trackers for the logs")
      .add("dataloader_num_workers", &f.dataloader_num_workers, "data loading threads");
}

// TrainingArguments from the flags of the same names. Throws ConfigError
// (one line) for values Hugging Face refuses.
inline accelerate::TrainingArguments training_arguments(const TrainingFlags& f) {
  // add_choice() admitted only names these functions parse.
  const auto interval = [](const std::string& name) {
    return *accelerate::parse_interval_strategy(name);
  };
  auto args = accelerate::TrainingArguments()
                  .output_dir(f.output_dir)
                  .per_device_train_batch_size(f.per_device_train_batch_size)
                  .per_device_eval_batch_size(f.per_device_eval_batch_size)
                  .gradient_accumulation_steps(f.gradient_accumulation_steps)
                  .learning_rate(f.learning_rate)
                  .weight_decay(f.weight_decay)
                  .max_grad_norm(f.max_grad_norm)
                  .num_train_epochs(f.num_train_epochs)
                  .max_steps(f.max_steps)
                  .lr_scheduler_type(*accelerate::parse_scheduler_type(f.lr_scheduler_type))
                  .lr_scheduler_kwargs(accelerate::parse_lr_scheduler_kwargs(f.lr_scheduler_kwargs))
                  .optim(accelerate::require_optimizer_name(f.optim))
                  .optim_args(f.optim_args)
                  .warmup_steps(f.warmup_steps)
                  .warmup_ratio(f.warmup_ratio)
                  .logging_strategy(interval(f.logging_strategy))
                  .logging_steps(f.logging_steps)
                  .logging_first_step(f.logging_first_step)
                  .eval_strategy(interval(f.eval_strategy))
                  .eval_delay(f.eval_delay)
                  .save_strategy(*accelerate::parse_save_strategy(f.save_strategy))
                  .save_steps(f.save_steps)
                  .save_only_model(f.save_only_model)
                  .load_best_model_at_end(f.load_best_model_at_end)
                  .seed(f.seed)
                  .bf16(f.bf16)
                  .gradient_checkpointing(f.gradient_checkpointing)
                  .fp16(f.fp16)
                  .report_to({f.report_to})
                  .dataloader_num_workers(f.dataloader_num_workers);
  if (f.eval_steps > 0) args.eval_steps(f.eval_steps);
  if (!f.metric_for_best_model.empty()) args.metric_for_best_model(f.metric_for_best_model);
  if (!f.greater_is_better.empty()) args.greater_is_better(f.greater_is_better == "true");
  if (f.save_total_limit > 0) args.save_total_limit(static_cast<int>(f.save_total_limit));
  if (!f.resume_from_checkpoint.empty()) args.resume_from_checkpoint(f.resume_from_checkpoint);
  args.validate();
  return args;
}

}  // namespace examples
