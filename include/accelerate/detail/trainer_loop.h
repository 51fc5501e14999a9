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

#include "accelerate/tracking/progress_bar.h"
#include "accelerate/trainer/trainer_callback.h"
#include "accelerate/trainer/training_arguments.h"

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

namespace detail {
// transformers' speed_metrics: "<prefix>_runtime" in seconds rounded to 4
// places, "<prefix>_samples_per_second" and "<prefix>_steps_per_second"
// rounded to 3, as its Trainer logs them.
void add_speed_metrics(Metrics& metrics, const std::string& prefix, double seconds, double samples,
                       double steps);
}  // namespace detail

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
  // Throws ConfigError when `folder` is a save_only_model checkpoint (the
  // weights without the state to resume from).
  static void refuse_weights_only_checkpoint(const std::string& folder);
  // ConfigError (one line) before the first step for checkpoints the
  // Accelerator cannot save in this job (Accelerator::check_save_state):
  // refusing at the first save would lose the steps before it.
  void refuse_checkpoints_it_cannot_save() const;

  // Callbacks see on_init_end when added (the Trainer is constructed by then).
  void add_callback(std::shared_ptr<TrainerCallback> callback);
  // The flags callbacks set; the Trainer acts on them (Hugging Face's
  // DefaultFlowCallback sets those the arguments call for).
  TrainerControl& control() { return control_; }
  bool should_stop_training() const { return control_.should_training_stop || done(); }

  void begin_train();
  void begin_epoch();
  // Before the first micro-batch of an optimizer step.
  void begin_step();
  // A micro-batch's loss (as computed, before accumulation scaling) and
  // its number of samples on this process.
  void add_loss(const at::Tensor& loss, int64_t samples);
  // After an optimizer step: the flags logging_steps, the eval and save
  // strategies and max_steps call for, on_step_end, then the log when
  // should_log (collective: every process must call it).
  void end_step(double grad_norm, double learning_rate);
  // After the loader's last batch of an epoch, or should_epoch_stop: the
  // "epoch" strategies' flags, on_epoch_end, then the log when should_log.
  void end_epoch();
  // on_evaluate (clears should_evaluate), the history and the trackers.
  void report_evaluation(Metrics metrics);
  // on_prediction_step, after each evaluation or prediction batch.
  void prediction_step();
  // on_predict, after predict().
  void report_prediction(const Metrics& metrics);
  // Hugging Face's best-metric rule, after an evaluation during training:
  // a better metric_for_best_model makes this step the best one. Throws
  // ConfigError when the evaluation lacks that metric. Returns whether the
  // metric is a new best (save_strategy best saves then).
  bool track_best(const Metrics& metrics);
  // save_state into output_dir/checkpoint-{step} (save_only_model: the
  // model's weights alone, save_model), trainer_state.json in it,
  // then the oldest folders beyond save_total_limit removed, never the best
  // one. on_save (clears should_save). Collective.
  std::string save_checkpoint(const torch::nn::Module& model);
  // With load_best_model_at_end: the best checkpoint's folder, when saved.
  std::optional<std::string> best_checkpoint_to_load() const;
  // While set, loading a checkpoint leaves the step counters and the loss
  // as they are (loading the best model at the end).
  void keep_counters_on_load(bool keep) { keep_counters_on_load_ = keep; }
  // save_total_limit 1 with a best checkpoint: only the best one is left
  // (Hugging Face keeps the newest too while training, to resume from).
  void remove_all_but_best_checkpoint();
  Metrics end_train();

  // For Accelerator::register_for_checkpointing: the step counters and the
  // loss since the last log, so a resumed run logs as the first would.
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

 private:
  void log_if_due();
  void publish(Metrics metrics, bool evaluation);
  double mean_over_processes(double value) const;

  TrainingArguments args_;
  Accelerator& accelerator_;
  TrainerState state_;
  std::vector<std::shared_ptr<TrainerCallback>> callbacks_;
  TrainerControl control_;
  double last_grad_norm_ = 0;  // of the last step, for its log
  double last_learning_rate_ = 0;
  bool keep_counters_on_load_ = false;
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
