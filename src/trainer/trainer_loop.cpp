#include "accelerate/detail/trainer_loop.h"

#include <torch/nn/module.h>
#include <torch/nn/modules/normalization.h>
#include <torch/optim/adamw.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/common/errors.h"
#include "accelerate/detail/checkpoint_metadata.h"
#include "accelerate/tracking/python_number.h"
#include "trainer/checkpoint_folders.h"
#include "trainer/trainer_deepspeed.h"

namespace accelerate {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Where transformers' Trainer puts a key in the dicts it logs: a step's
// {loss, grad_norm, learning_rate}, an evaluation's metrics then its loss,
// the speed metrics, train_loss, and the epoch last.
int display_rank(const std::string& key) {
  if (key == "loss") return 0;
  if (key == "grad_norm") return 1;
  if (key == "learning_rate") return 2;
  if (key == "train_loss") return 14;
  if (key == "epoch") return 20;
  if (ends_with(key, "_runtime")) return 10;
  if (ends_with(key, "_samples_per_second")) return 11;
  if (ends_with(key, "_steps_per_second")) return 12;
  if (ends_with(key, "_loss")) return 4;
  return 3;
}

// The line transformers' console callbacks print for a log: a Python dict
// whose numbers are f"{v:.4g}" strings, {'loss': '2.312', 'epoch': '0.5'}.
// The logs themselves (log_history, trackers, callbacks) keep every digit.
std::string dict_text(const Metrics& metrics) {
  std::vector<std::pair<std::string, double>> items(metrics.begin(), metrics.end());
  std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
    return display_rank(a.first) < display_rank(b.first);
  });
  std::string text = "{";
  for (const auto& [key, value] : items) {
    if (text.size() > 1) text += ", ";
    text += "'" + key + "': '" + python_general_format(value, 4) + "'";
  }
  return text + "}";
}

}  // namespace

void detail::add_speed_metrics(Metrics& metrics, const std::string& prefix, double seconds,
                               double samples, double steps) {
  metrics[prefix + "_runtime"] = python_round(seconds, 4);
  if (seconds <= 0) return;  // as transformers: no rates for a zero runtime
  metrics[prefix + "_samples_per_second"] = python_round(samples / seconds, 3);
  metrics[prefix + "_steps_per_second"] = python_round(steps / seconds, 3);
}

TrainerLoop::TrainerLoop(TrainingArguments args, Accelerator& accelerator)
    : args_(std::move(args)), accelerator_(accelerator) {
  args_.validate();
  // As transformers' Trainer: the best checkpoint's whole weights could not
  // be loaded back into a sharded model.
  const DistributedType type = accelerator_.distributed_type();
  if (args_.save_only_model() && args_.load_best_model_at_end() &&
      (type == DistributedType::kDeepSpeed || type == DistributedType::kFsdp)) {
    throw ConfigError(std::string(type == DistributedType::kDeepSpeed ? "DeepSpeed" : "FSDP") +
                      " can't be used with save_only_model along with load_best_model_at_end");
  }
}

AcceleratorOptions TrainerLoop::accelerator_options(const TrainingArguments& args,
                                                    AcceleratorOptions options) {
  args.validate();
  options.gradient_accumulation_steps(args.gradient_accumulation_steps());
  if (args.bf16()) options.mixed_precision(MixedPrecision::kBF16);
  if (args.fp16()) options.mixed_precision(MixedPrecision::kFP16);
  std::vector<std::string> trackers;
  for (const auto& name : args.report_to()) {
    if (name != "none") trackers.push_back(name);
  }
  if (!trackers.empty()) options.log_with(trackers);
  if (!options.project_dir()) options.project_dir(args.output_dir());
  trainer::apply_deepspeed_arguments(args, options, current_environment());
  return options;
}

std::vector<torch::optim::OptimizerParamGroup> TrainerLoop::adamw_groups(
    const torch::nn::Module& model, const TrainingArguments& args) {
  std::vector<at::Tensor> decay, no_decay;
  for (const auto& item : model.named_modules()) {
    const bool layer_norm = dynamic_cast<const torch::nn::LayerNormImpl*>(item.value().get());
    for (const auto& parameter : item.value()->named_parameters(/*recurse=*/false)) {
      if (!parameter.value().requires_grad()) continue;
      const bool bias = parameter.key() == "bias";
      (layer_norm || bias ? no_decay : decay).push_back(parameter.value());
    }
  }
  const auto options = [&](double weight_decay) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(args.learning_rate())
            .betas({args.adam_beta1(), args.adam_beta2()})
            .eps(args.adam_epsilon())
            .weight_decay(weight_decay));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, options(args.weight_decay()));
  groups.emplace_back(no_decay, options(0.0));
  return groups;
}

void TrainerLoop::plan(int64_t batches_per_epoch) {
  if (batches_per_epoch < 1) throw ConfigError("the training data loader yields no batch");
  state_.steps_per_epoch =
      std::max<int64_t>(1, ceil_div(batches_per_epoch, accelerator_.gradient_accumulation_steps()));
  state_.max_steps =
      args_.max_steps() > 0
          ? args_.max_steps()
          : static_cast<int64_t>(
                std::ceil(args_.num_train_epochs() * static_cast<double>(state_.steps_per_epoch)));
  // transformers' TrainerState.compute_steps: fractions of the run become steps.
  state_.logging_steps = steps_in_run(args_.logging_steps(), state_.max_steps);
  state_.eval_steps = steps_in_run(args_.eval_steps_or_logging(), state_.max_steps);
  state_.save_steps = steps_in_run(args_.save_steps(), state_.max_steps);
}

int64_t TrainerLoop::warmup_steps() const {
  if (args_.warmup_steps() > 0) return args_.warmup_steps();
  return static_cast<int64_t>(
      std::ceil(args_.warmup_ratio() * static_cast<double>(state_.max_steps)));
}

std::optional<std::string> TrainerLoop::checkpoint_to_resume() const {
  const auto& wanted = args_.resume_from_checkpoint();
  if (!wanted) return std::nullopt;
  if (*wanted != "latest") return *wanted;
  const auto folders = trainer::checkpoint_folders(args_.output_dir());
  if (folders.empty()) return std::nullopt;
  return folders.back().path;
}

void TrainerLoop::refuse_checkpoints_it_cannot_save() const {
  // Every strategy but no saves at the end of training too, as transformers'.
  if (args_.save_strategy() == SaveStrategy::kNo || args_.save_only_model()) return;
  accelerator_.check_save_state();
}

void TrainerLoop::refuse_weights_only_checkpoint(const std::string& folder) {
  // save_only_model folders hold the weights but no save_state files.
  // transformers resumes from them with a fresh optimizer, schedule and random
  // state, which is not the run that was interrupted; this Trainer resumes
  // exactly or not at all.
  namespace fs = std::filesystem;
  const bool weights = fs::exists(fs::path(folder) / "model.safetensors") ||
                       fs::exists(fs::path(folder) / "model.safetensors.index.json");
  if (weights && !fs::exists(fs::path(folder) / kCheckpointMetadataFile)) {
    throw ConfigError("resume_from_checkpoint: " + folder +
                      " holds model weights only (saved with save_only_model): no optimizer, "
                      "schedule or random state to resume from; load its weights with "
                      "load_model and start a new run instead");
  }
}

void TrainerLoop::add_callback(std::shared_ptr<TrainerCallback> callback) {
  callback->on_init_end(args_, state_, control_);
  callbacks_.push_back(std::move(callback));
}

void TrainerLoop::begin_train() {
  // report_to's trackers write under output_dir/runs (transformers writes
  // TensorBoard's files under output_dir/runs/... too), with the run's main
  // settings; a program that started its own trackers keeps them.
  const auto& report_to = args_.report_to();
  const bool reports = std::any_of(report_to.begin(), report_to.end(),
                                   [](const std::string& t) { return t != "none"; });
  if (reports && !accelerator_.trackers_initialized()) {
    accelerator_.init_trackers(
        "runs",
        {{"learning_rate", args_.learning_rate()},
         {"per_device_train_batch_size", static_cast<int64_t>(args_.per_device_train_batch_size())},
         {"gradient_accumulation_steps", static_cast<int64_t>(args_.gradient_accumulation_steps())},
         {"max_steps", state_.max_steps},
         {"seed", static_cast<int64_t>(args_.seed())}});
  }
  started_ = std::chrono::steady_clock::now();
  samples_seen_ = 0;
  bar_ =
      std::make_unique<ProgressBar>(ProgressBarOptions()
                                        .total(state_.max_steps)
                                        .unit("step")
                                        .disable(args_.disable_tqdm())
                                        .local_main_process(accelerator_.is_local_main_process()));
  bar_->update(state_.global_step);  // a resumed run starts part-way
  control_.should_training_stop = false;
  for (auto& callback : callbacks_) callback->on_train_begin(args_, state_, control_);
}

void TrainerLoop::begin_epoch() {
  control_.should_epoch_stop = false;
  for (auto& callback : callbacks_) callback->on_epoch_begin(args_, state_, control_);
}

void TrainerLoop::begin_step() {
  control_.should_log = false;
  control_.should_evaluate = false;
  control_.should_save = false;
  for (auto& callback : callbacks_) callback->on_step_begin(args_, state_, control_);
}

void TrainerLoop::add_loss(const at::Tensor& loss, int64_t samples) {
  // The accumulation in force (the Accelerator's), which the logged loss,
  // epoch and throughput follow.
  at::Tensor share = loss.detach().to(at::kDouble) / accelerator_.gradient_accumulation_steps();
  const at::Tensor so_far = loss_sum_.defined() ? loss_sum_ : at::zeros_like(share);
  if (args_.logging_nan_inf_filter()) {
    // Hugging Face's substitute for a NaN/Inf loss: what has been summed since
    // the last log over the steps since then, this one included. A select,
    // not a test, so the device need not be waited for.
    share = at::where(share.isfinite(), share, so_far / static_cast<double>(1 + loss_steps_))
                .reshape(share.sizes());
  }
  loss_sum_ = so_far + share;
  samples_seen_ += samples;
}

double TrainerLoop::mean_over_processes(double value) const {
  at::Tensor t = at::full({1}, value, at::kDouble).to(accelerator_.device());
  return accelerator_.reduce(t, ReduceOp::kSum).item<double>() / accelerator_.num_processes();
}

void TrainerLoop::end_step(double grad_norm, double learning_rate) {
  ++state_.global_step;
  ++loss_steps_;
  if (bar_) bar_->update();
  state_.epoch =
      static_cast<double>(state_.global_step) / static_cast<double>(state_.steps_per_epoch);
  last_grad_norm_ = grad_norm;
  last_learning_rate_ = learning_rate;
  // Hugging Face's DefaultFlowCallback, before the program's callbacks.
  // plan() resolved the intervals; validate() made them positive where
  // their strategy is steps.
  const int64_t step = state_.global_step;
  const bool eval_steps = args_.eval_strategy() == IntervalStrategy::kSteps &&
                          args_.eval_delay() <= static_cast<double>(step);
  const bool save_steps = args_.save_strategy() == SaveStrategy::kSteps;
  if (step == 1 && args_.logging_first_step()) control_.should_log = true;
  if (args_.logging_strategy() == IntervalStrategy::kSteps && step % state_.logging_steps == 0) {
    control_.should_log = true;
  }
  if (eval_steps && step % state_.eval_steps == 0) control_.should_evaluate = true;
  if (save_steps && step % state_.save_steps == 0) control_.should_save = true;
  if (done()) {
    control_.should_training_stop = true;
    // The last step is evaluated (once eval_delay has passed) and saved under
    // "steps" strategies even when it is no multiple of their interval, as
    // transformers 5.24 does.
    if (eval_steps) control_.should_evaluate = true;
    if (save_steps) control_.should_save = true;
  }
  for (auto& callback : callbacks_) callback->on_step_end(args_, state_, control_);
  log_if_due();
}

void TrainerLoop::end_epoch() {
  if (args_.logging_strategy() == IntervalStrategy::kEpoch) control_.should_log = true;
  // eval_delay counts epochs here, the fractional epoch of a cut-short one too.
  if (args_.eval_strategy() == IntervalStrategy::kEpoch && args_.eval_delay() <= state_.epoch) {
    control_.should_evaluate = true;
  }
  if (args_.save_strategy() == SaveStrategy::kEpoch) control_.should_save = true;
  for (auto& callback : callbacks_) callback->on_epoch_end(args_, state_, control_);
  log_if_due();
}

// The mean step loss since the last log, averaged over the processes.
void TrainerLoop::log_if_due() {
  if (!control_.should_log) return;
  if (loss_steps_ == 0) {  // nothing since the last log (Hugging Face skips it too)
    control_.should_log = false;
    return;
  }
  const double local = loss_sum_.defined() ? loss_sum_.item<double>() : 0.0;
  const double loss = mean_over_processes(local) / static_cast<double>(loss_steps_);
  total_loss_ += loss * static_cast<double>(loss_steps_);
  total_loss_steps_ += loss_steps_;
  loss_sum_ = at::Tensor();
  loss_steps_ = 0;
  if (bar_) bar_->set_postfix({{"loss", loss}});
  Metrics logs{{"loss", loss}, {"learning_rate", last_learning_rate_}, {"epoch", state_.epoch}};
  if (!std::isnan(last_grad_norm_)) logs["grad_norm"] = last_grad_norm_;
  publish(std::move(logs), /*evaluation=*/false);
}

void TrainerLoop::report_evaluation(Metrics metrics) {
  metrics["epoch"] = state_.epoch;
  publish(std::move(metrics), /*evaluation=*/true);
}

void TrainerLoop::prediction_step() {
  for (auto& callback : callbacks_) callback->on_prediction_step(args_, state_, control_);
}

void TrainerLoop::report_prediction(const Metrics& metrics) {
  for (auto& callback : callbacks_) callback->on_predict(args_, state_, control_, metrics);
}

bool TrainerLoop::track_best(const Metrics& metrics) {
  const auto key = args_.best_metric_key();
  if (!key) return false;
  const auto found = metrics.find(*key);
  if (found == metrics.end()) {
    std::string available;
    for (const auto& [name, value] : metrics) available += (available.empty() ? "" : ", ") + name;
    throw ConfigError("metric_for_best_model is " + *key +
                      ", which the evaluation did not report (it reported " + available + ")");
  }
  const double value = found->second;
  const bool better =
      !state_.best_metric || (args_.best_metric_greater_is_better() ? value > *state_.best_metric
                                                                    : value < *state_.best_metric);
  if (!better) return false;
  state_.best_metric = value;
  state_.best_global_step = state_.global_step;
  return true;
}

// Printed by the main process, sent to the trackers, kept in the history
// (with "step"), and handed to the callbacks.
void TrainerLoop::publish(Metrics metrics, bool evaluation) {
  const bool bar_shown = bar_ && bar_->shown();
  if (bar_shown) bar_->clear();  // the line goes where the bar was; the bar below it
  if (accelerator_.is_main_process()) std::cout << dict_text(metrics) << std::endl;
  if (bar_shown) bar_->refresh();
  TrackerValues values;
  for (const auto& [key, value] : metrics) values[key] = value;
  accelerator_.log(values, state_.global_step);
  metrics["step"] = static_cast<double>(state_.global_step);
  state_.log_history.push_back(metrics);
  if (evaluation) {
    control_.should_evaluate = false;
  } else {
    control_.should_log = false;
  }
  for (auto& callback : callbacks_) {
    if (evaluation) {
      callback->on_evaluate(args_, state_, control_, metrics);
    } else {
      callback->on_log(args_, state_, control_, metrics);
    }
  }
}

std::string TrainerLoop::save_checkpoint(const torch::nn::Module& model) {
  const std::string folder =
      args_.output_dir() + "/" + trainer::checkpoint_name(state_.global_step);
  if (args_.save_only_model()) {
    accelerator_.save_model(model, folder);  // the weights alone, as transformers' save_model
  } else {
    accelerator_.save_state(folder);
  }
  // Hugging Face names the best checkpoint once the best step's folder exists.
  if (state_.best_global_step) {
    const std::string best =
        args_.output_dir() + "/" + trainer::checkpoint_name(*state_.best_global_step);
    if (std::filesystem::exists(best)) state_.best_model_checkpoint = best;
  }
  if (accelerator_.is_main_process()) {
    trainer::write_trainer_state(folder, state_);
    if (args_.save_total_limit()) {
      trainer::remove_oldest_checkpoints(args_.output_dir(), *args_.save_total_limit(),
                                         state_.best_model_checkpoint);
    }
  }
  accelerator_.wait_for_everyone();
  control_.should_save = false;
  for (auto& callback : callbacks_) callback->on_save(args_, state_, control_, folder);
  return folder;
}

std::optional<std::string> TrainerLoop::best_checkpoint_to_load() const {
  // Every process decides alike (a folder missing on one machine would
  // otherwise split them): load_state reports a missing folder on all.
  if (!args_.load_best_model_at_end()) return std::nullopt;
  return state_.best_model_checkpoint;
}

void TrainerLoop::remove_all_but_best_checkpoint() {
  if (accelerator_.is_main_process() && state_.best_model_checkpoint &&
      args_.save_total_limit() == 1) {
    trainer::remove_checkpoints_except(args_.output_dir(), *state_.best_model_checkpoint);
  }
  accelerator_.wait_for_everyone();
}

Metrics TrainerLoop::end_train() {
  if (bar_) bar_->close();
  // The steps since the last log count in train_loss too, as in Hugging Face
  // (no log is forced at the last step). Every process has the same count.
  if (loss_steps_ > 0) {
    total_loss_ += mean_over_processes(loss_sum_.defined() ? loss_sum_.item<double>() : 0.0);
    total_loss_steps_ += loss_steps_;
    loss_sum_ = at::Tensor();
    loss_steps_ = 0;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  const double samples =
      mean_over_processes(static_cast<double>(samples_seen_)) * accelerator_.num_processes();
  Metrics metrics{{"train_loss", total_loss_steps_ > 0 ? total_loss_ / total_loss_steps_ : 0.0},
                  {"epoch", state_.epoch}};
  detail::add_speed_metrics(metrics, "train", seconds, samples,
                            static_cast<double>(state_.global_step));
  // Logged as transformers logs it: printed, to the trackers and log_history.
  publish(metrics, /*evaluation=*/false);
  for (auto& callback : callbacks_) callback->on_train_end(args_, state_, control_);
  return metrics;
}

void TrainerLoop::save(torch::serialize::OutputArchive& archive) const {
  archive.write("global_step", at::full({1}, state_.global_step, at::kLong));
  archive.write("loss_steps", at::full({1}, loss_steps_, at::kLong));
  archive.write("loss_sum", loss_sum_.defined() ? loss_sum_.cpu() : at::zeros({}, at::kDouble));
  archive.write("total_loss", at::full({1}, total_loss_, at::kDouble));
  archive.write("total_loss_steps", at::full({1}, total_loss_steps_, at::kLong));
  // Best-model tracking, so a resumed run ranks and keeps checkpoints as
  // the first would (absent from checkpoints written before it existed).
  if (state_.best_metric) {
    archive.write("best_metric", at::full({1}, *state_.best_metric, at::kDouble));
    archive.write("best_global_step", at::full({1}, *state_.best_global_step, at::kLong));
  }
  if (state_.best_model_checkpoint) {
    archive.write("best_model_checkpoint", c10::IValue(*state_.best_model_checkpoint));
  }
}

void TrainerLoop::load(torch::serialize::InputArchive& archive) {
  if (keep_counters_on_load_) return;
  at::Tensor step, loss_steps, loss_sum, total_loss, total_loss_steps;
  archive.read("global_step", step);
  archive.read("loss_steps", loss_steps);
  archive.read("loss_sum", loss_sum);
  archive.read("total_loss", total_loss);
  archive.read("total_loss_steps", total_loss_steps);
  state_.global_step = step.item<int64_t>();
  loss_steps_ = loss_steps.item<int64_t>();
  loss_sum_ = loss_steps_ > 0 ? loss_sum.to(accelerator_.device()) : at::Tensor();
  total_loss_ = total_loss.item<double>();
  total_loss_steps_ = total_loss_steps.item<int64_t>();
  at::Tensor best_metric, best_step;
  c10::IValue best_folder;
  state_.best_metric.reset();
  state_.best_global_step.reset();
  state_.best_model_checkpoint.reset();
  if (archive.try_read("best_metric", best_metric) &&
      archive.try_read("best_global_step", best_step)) {
    state_.best_metric = best_metric.item<double>();
    state_.best_global_step = best_step.item<int64_t>();
  }
  if (archive.try_read("best_model_checkpoint", best_folder)) {
    state_.best_model_checkpoint = best_folder.toStringRef();
  }
  state_.epoch = state_.steps_per_epoch > 0 ? static_cast<double>(state_.global_step) /
                                                  static_cast<double>(state_.steps_per_epoch)
                                            : 0.0;
}

}  // namespace accelerate
