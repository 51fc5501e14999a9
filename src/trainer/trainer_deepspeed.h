// transformers' HfTrainerDeepSpeedConfig for accelerate::Trainer: a
// DeepSpeed config's "auto" entries the TrainingArguments decide
// (gradient_clipping from max_grad_norm), and a file value that differs from
// the TrainingArguments' refused with both named, so that training and the
// Trainer's logs follow one set of values. Internal to the trainer area.
#pragma once

#include "accelerate/accelerator/accelerator_options.h"
#include "accelerate/common/environment.h"
#include "accelerate/trainer/training_arguments.h"

namespace accelerate::trainer {

// When the run is DeepSpeed (options.deepspeed_plugin(), else the launch's
// environment), compares the config file's explicit values with `args` as
// transformers does (train_micro_batch_size_per_gpu, gradient_accumulation_steps,
// gradient_clipping, optimizer.params lr/betas/eps/weight_decay,
// scheduler.params.warmup_max_lr, fp16/bf16 enabled) and throws one
// ConfigError naming each mismatch; fills gradient_clipping "auto" (and
// a plugin without a file whose clipping nobody set) from max_grad_norm.
// The plugin it decided is put into `options`.
void apply_deepspeed_arguments(const TrainingArguments& args, AcceleratorOptions& options,
                               const Environment& env);

}  // namespace accelerate::trainer
