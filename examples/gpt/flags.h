// The GPT example's command line (examples/common/example_flags.h): the
// training flags (the example's own and TrainingArguments' by their Hugging
// Face names) and `generate`'s. Every flag is declared here once, with its
// default and help; `gpt --help` and `gpt generate --help` list them.
#pragma once

#include <accelerate/trainer/training_arguments.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../common/example_flags.h"
#include "../common/training_flags.h"

namespace gpt_flags {

// `gpt [flags]`: the example's own flags, then TrainingArguments' by their
// Hugging Face names (examples/common/training_flags.h) with defaults that
// suit the tiny preset on a CPU (docs/gpt.md), not Hugging Face's.
struct TrainFlags {
  std::string data_dir = "data/brown";
  std::string preset = "tiny";
  int vocab_size = 4096;
  int64_t block_size = 0;  // 0: the preset's context
  double dropout = 0.0;
  int64_t max_eval_samples = 0;  // 0: all
  examples::TrainingFlags training = gpt_training_defaults();

  static examples::TrainingFlags gpt_training_defaults() {
    examples::TrainingFlags t;
    t.output_dir = "runs/gpt";
    t.per_device_train_batch_size = 16;
    t.per_device_eval_batch_size = 16;
    t.learning_rate = 1e-3;
    t.weight_decay = 0.1;
    t.num_train_epochs = 1.0;
    t.max_steps = 200;
    t.lr_scheduler_type = "cosine";
    t.warmup_steps = 20;
    t.logging_steps = 20;
    t.eval_strategy = "steps";
    t.eval_steps = 100;
    t.save_steps = 100;
    t.save_total_limit = 2;
    return t;
  }
};

inline void add_flags(examples::Flags& flags, TrainFlags& f) {
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
           "evaluate on the first N validation windows only; 0: all", "N");
  examples::add_training_flags(flags, f.training);
}

// TrainingArguments from the flags of the same names. Throws ConfigError
// (one line) for values Hugging Face refuses.
inline accelerate::TrainingArguments training_arguments(const TrainFlags& f) {
  return examples::training_arguments(f.training);
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
