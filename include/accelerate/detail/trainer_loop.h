// The Trainer's bookkeeping, which does not depend on the model or dataset
// types: how long the run is, when to log, evaluate and save, the training
// loss between logs, checkpoint folders and their rotation, callbacks, and
// the state save_state keeps. accelerate::Trainer (trainer.h) drives it;
// programs use Trainer, not this.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "accelerate/progress_bar.h"
#include "accelerate/trainer_callback.h"
#include "accelerate/training_arguments.h"

namespace torch {
namespace nn {
class Module;
}
namespace optim {
class OptimizerParamGroup;
}
namespace serialize {
class OutputArchive;
class InputArchive;
}  // namespace serialize
}  // namespace torch

namespace accelerate {

class Accelerator;
struct AcceleratorOptions;

class TrainerLoop {
 public:
  TrainerLoop(TrainingArguments args, Accelerator& accelerator);

  // The Accelerator settings the arguments ask for, on top of `options`:
  // accumulation, bf16/fp16, trackers, project folder.
  static AcceleratorOptions accelerator_options(const TrainingArguments& args,
                                                AcceleratorOptions options);
  // AdamW's two groups, as Hugging Face builds them: weight decay for every
  // parameter except biases and LayerNorm weights.
  static std::vector<torch::optim::OptimizerParamGroup> adamw_groups(const torch::nn::Module& model,
                                                                     const TrainingArguments& args);

  // Sets the run's length from the prepared loader's batches per epoch on
  // this process: max_steps, or epochs of ceil(batches / accumulation) steps.
  void plan(int64_t batches_per_epoch);
  int64_t warmup_steps() const;
  const TrainerState& state() const { return state_; }
  const TrainingArguments& args() const { return args_; }
  bool done() const { return state_.global_step >= state_.max_steps; }

  // The checkpoint folder resume_from_checkpoint names ("latest": the
  // newest in output_dir), or nullopt to start afresh.
  std::optional<std::string> checkpoint_to_resume() const;

  void add_callback(std::shared_ptr<TrainerCallback> callback);
  void begin_train();
  // A micro-batch's loss (as computed, before accumulation scaling) and
  // its number of samples on this process.
  void add_loss(const at::Tensor& loss, int64_t samples);
  // After an optimizer step. Logs when it is time (collective: every
  // process must call it). Returns whether to evaluate and to save now.
  struct Due {
    bool evaluate = false;
    bool save = false;
  };
  Due end_step(double grad_norm, double learning_rate);
  // After the loader's last batch of an epoch: evaluation and saving "epoch".
  Due end_epoch();
  void report_evaluation(Metrics metrics);
  // save_state into output_dir/checkpoint-{step}, trainer_state.json in it,
  // then the oldest folders beyond save_total_limit removed. Collective.
  std::string save_checkpoint();
  Metrics end_train();

  // For Accelerator::register_for_checkpointing: the step counters and the
  // loss since the last log, so a resumed run logs as the first would.
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

 private:
  void emit_log(Metrics logs);
  void publish(Metrics metrics, bool evaluation);
  double mean_over_processes(double value) const;

  TrainingArguments args_;
  Accelerator& accelerator_;
  TrainerState state_;
  std::vector<std::shared_ptr<TrainerCallback>> callbacks_;
  at::Tensor loss_sum_;     // since the last log, this process
  int64_t loss_steps_ = 0;  // optimizer steps in loss_sum_
  double total_loss_ = 0;   // mean step losses summed over the run, for train_loss
  int64_t total_loss_steps_ = 0;
  int64_t samples_seen_ = 0;
  std::chrono::steady_clock::time_point started_;
  // Optimizer steps out of max_steps, on the local main process's terminal.
  std::unique_ptr<ProgressBar> bar_;
};

}  // namespace accelerate
