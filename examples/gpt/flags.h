// The GPT example's command line (examples/common/example_flags.h): the
// training flags (the example's own and TrainingArguments' by their Hugging
// Face names) and `generate`'s. Every flag is declared here once, with its
// default and help; `gpt --help` and `gpt generate --help` list them.
#pragma once

#include <accelerate/training_arguments.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../common/example_flags.h"

namespace gpt_flags {

// `gpt [flags]`. The TrainingArguments defaults suit the tiny preset on a
// CPU (docs/gpt.md), not Hugging Face's.
struct TrainFlags {
  std::string data_dir = "data/brown";
  std::string preset = "tiny";
  int vocab_size = 4096;
  int64_t block_size = 0;  // 0: the preset's context
  double dropout = 0.0;
  int64_t max_eval_samples = 0;  // 0: all
  // TrainingArguments, by the same names.
  std::string output_dir = "runs/gpt";
  int64_t per_device_train_batch_size = 16;
  int64_t per_device_eval_batch_size = 16;
  int gradient_accumulation_steps = 1;
  double learning_rate = 1e-3;
  double weight_decay = 0.1;
  double max_grad_norm = 1.0;
  double num_train_epochs = 1.0;
  int64_t max_steps = 200;
  std::string lr_scheduler_type = "cosine";
  std::string lr_scheduler_kwargs;  // JSON, as Hugging Face's flag
  std::string optim = "adamw_torch";
  std::string optim_args;
  int64_t warmup_steps = 20;
  double warmup_ratio = 0.0;
  int64_t logging_steps = 20;
  std::string eval_strategy = "steps";
  int64_t eval_steps = 100;
  std::string save_strategy = "steps";
  int64_t save_steps = 100;
  int64_t save_total_limit = 2;  // <= 0: keep every checkpoint
  std::string resume_from_checkpoint;
  uint64_t seed = 42;
  bool bf16 = false;
  bool fp16 = false;
  bool gradient_checkpointing = false;
  std::string report_to = "none";
  int64_t dataloader_num_workers = 0;
};

inline void add_flags(examples::Flags& flags, TrainFlags& f) {
  const std::vector<std::string> intervals{"no", "steps", "epoch"};
  flags
      .add("data_dir", &f.data_dir, "train.txt and validation.txt; token caches go to DIR/cache",
           "DIR")
      .add_choice("preset", &f.preset, {"tiny", "small"},
                  "the model: tiny (4 layers, width 128, context 128) or small (6 layers, width "
                  "384, context 256)")
      .add("vocab_size", &f.vocab_size, "the BPE vocabulary, trained on the train split once")
      .add("block_size", &f.block_size, "tokens per training window; 0: the preset's context")
      .add("dropout", &f.dropout, "GPT-2's residual, embedding and attention dropout")
      .add("max_eval_samples", &f.max_eval_samples,
           "evaluate on the first N validation windows only; 0: all", "N")
      .add("output_dir", &f.output_dir, "checkpoints, the tokenizer, then the model in DIR/model",
           "DIR")
      .add("per_device_train_batch_size", &f.per_device_train_batch_size,
           "training batch per process")
      .add("per_device_eval_batch_size", &f.per_device_eval_batch_size,
           "evaluation batch per process")
      .add("gradient_accumulation_steps", &f.gradient_accumulation_steps,
           "batches per optimizer step")
      .add("learning_rate", &f.learning_rate, "the optimizer's peak learning rate")
      .add("weight_decay", &f.weight_decay, "AdamW's weight decay (not on biases and LayerNorms)")
      .add("max_grad_norm", &f.max_grad_norm, "clip the gradient norm to this; 0: no clipping")
      .add("num_train_epochs", &f.num_train_epochs, "the run's length, unless max_steps > 0")
      .add("max_steps", &f.max_steps, "the run's length in optimizer steps; <= 0: num_train_epochs")
      .add_choice("lr_scheduler_type", &f.lr_scheduler_type,
                  {"linear", "cosine", "constant", "constant_with_warmup", "cosine_with_restarts",
                   "polynomial", "inverse_sqrt", "reduce_lr_on_plateau", "warmup_stable_decay"},
                  "the learning rate schedule after the warm-up")
      .add("lr_scheduler_kwargs", &f.lr_scheduler_kwargs,
           "the schedule's extra parameters, e.g. {\"num_cycles\": 2}", "JSON")
      .add_choice("optim", &f.optim, {"adamw_torch", "sgd", "adafactor"}, "the optimizer")
      .add("optim_args", &f.optim_args, "sgd's momentum, dampening, nesterov: key=value,...",
           "ARGS")
      .add("warmup_steps", &f.warmup_steps, "warm-up steps; 0: warmup_ratio of the steps")
      .add("warmup_ratio", &f.warmup_ratio, "warm-up as a fraction of the steps")
      .add("logging_steps", &f.logging_steps,
           "log loss, grad norm, learning rate and tokens/s every N steps", "N")
      .add_choice("eval_strategy", &f.eval_strategy, intervals, "when to evaluate")
      .add("eval_steps", &f.eval_steps, "evaluate every N steps (eval_strategy steps)", "N")
      .add_choice("save_strategy", &f.save_strategy, intervals, "when to save a checkpoint")
      .add("save_steps", &f.save_steps, "save every N steps (save_strategy steps)", "N")
      .add("save_total_limit", &f.save_total_limit, "checkpoints to keep; <= 0: all", "N")
      .add("resume_from_checkpoint", &f.resume_from_checkpoint,
           "continue exactly from a checkpoint folder, or the newest in output_dir", "PATH|latest")
      .add("seed", &f.seed, "the seed of the model's initialisation and the data order")
      .add("bf16", &f.bf16, "bfloat16 mixed precision")
      .add("fp16", &f.fp16, "float16 mixed precision (with loss scaling)")
      .add("gradient_checkpointing", &f.gradient_checkpointing,
           "recompute each block's activations in backward")
      .add_choice("report_to", &f.report_to, {"tensorboard", "jsonl", "csv", "all", "none"},
                  "trackers for the logs")
      .add("dataloader_num_workers", &f.dataloader_num_workers, "data loading threads");
}

// TrainingArguments from the flags of the same names. Throws ConfigError
// (one line) for values Hugging Face refuses.
inline accelerate::TrainingArguments training_arguments(const TrainFlags& f) {
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
                  .logging_steps(f.logging_steps)
                  .eval_strategy(interval(f.eval_strategy))
                  .eval_steps(f.eval_steps)
                  .save_strategy(interval(f.save_strategy))
                  .save_steps(f.save_steps)
                  .seed(f.seed)
                  .bf16(f.bf16)
                  .fp16(f.fp16)
                  .gradient_checkpointing(f.gradient_checkpointing)
                  .report_to({f.report_to})
                  .dataloader_num_workers(f.dataloader_num_workers);
  if (f.save_total_limit > 0) args.save_total_limit(static_cast<int>(f.save_total_limit));
  if (!f.resume_from_checkpoint.empty()) args.resume_from_checkpoint(f.resume_from_checkpoint);
  args.validate();
  return args;
}

// `gpt generate [flags]`.
struct GenerateFlags {
  std::string model_dir = "runs/gpt/model";
  std::string prompt = "The";
  int64_t max_new_tokens = 50;
  double temperature = 0.8;
  int64_t top_k = 40;
  uint64_t seed = 1;
};

inline void add_flags(examples::Flags& flags, GenerateFlags& f) {
  flags.add("model_dir", &f.model_dir, "a model the training saved (with tokenizer.bpe)", "DIR")
      .add("prompt", &f.prompt, "the text to continue")
      .add("max_new_tokens", &f.max_new_tokens, "tokens to sample after the prompt", "N")
      .add("temperature", &f.temperature, "sampling temperature; 0: greedy")
      .add("top_k", &f.top_k, "sample among the K likeliest tokens; 0: all", "K")
      .add("seed", &f.seed, "the sampling seed");
}

}  // namespace gpt_flags
