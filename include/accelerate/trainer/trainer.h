// accelerate::Trainer: Hugging Face's Trainer for C++ programs. It turns
// TrainingArguments into a training run on top of an Accelerator, so the
// same program runs on one process, many, with mixed precision or ZeRO, as
// `accelerate launch` says:
//
//   accelerate::Trainer trainer(
//       model, args, train_dataset,
//       [](Gpt& model, const accelerate::Example& batch) {
//         return model->loss(batch.data, batch.target);
//       },
//       eval_dataset);
//   trainer.train();                 // logs, evaluates, saves as args say
//   trainer.evaluate();              // {"eval_loss", "eval_perplexity", ...}
//   trainer.save_model();            // output_dir/model.safetensors
//
// What it does per optimizer step, as Hugging Face's does: accumulation
// (args.gradient_accumulation_steps micro-batches), clipping to
// max_grad_norm, args.optim's optimizer (AdamW by default; no weight decay
// on biases and LayerNorm weights), the learning-rate schedule, logging the
// mean loss every logging_steps,
// evaluation and checkpoints at their intervals (save_state, so resuming
// with resume_from_checkpoint continues exactly). A function returning a
// ModelOutput (loss and logits) gives compute_metrics and predict their
// predictions; callbacks steer the run through TrainerControl; with
// metric_for_best_model the best checkpoint is tracked, kept and, with
// load_best_model_at_end, loaded at the end. docs/trainer.md.
#pragma once

#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/accelerator/optimizer.h"
#include "accelerate/accelerator/random.h"
#include "accelerate/accelerator/scheduler.h"
#include "accelerate/checkpoint/model_saving.h"
#include "accelerate/common/scope_guard.h"
#include "accelerate/data/data_loader.h"
#include "accelerate/detail/trainer_evaluation.h"
#include "accelerate/detail/trainer_loop.h"
#include "accelerate/detail/trainer_optimizer.h"
#include "accelerate/schedule/lr_schedule.h"
#include "accelerate/schedule/reduce_lr_on_plateau.h"
#include "accelerate/trainer/trainer_outputs.h"

namespace accelerate {

namespace detail {
// Samples in a batch: rows of its tensor or of its data.
inline int64_t batch_rows(const at::Tensor& batch) { return batch.dim() ? batch.size(0) : 1; }
template <class Data, class Target>
int64_t batch_rows(const torch::data::Example<Data, Target>& batch) {
  return batch_rows(batch.data);
}
// The labels of a batch when ModelOutput has none: an Example's tensor target.
template <class Batch>
at::Tensor batch_labels(const Batch& /*batch*/) {
  return {};
}
template <class Data>
at::Tensor batch_labels(const torch::data::Example<Data, at::Tensor>& batch) {
  return batch.target;
}
// "eval_accuracy" from "accuracy", as Hugging Face prefixes compute_metrics' names.
inline Metrics prefixed(const Metrics& metrics, const std::string& prefix) {
  Metrics out;
  for (const auto& [key, value] : metrics) {
    out[key.rfind(prefix + "_", 0) == 0 ? key : prefix + "_" + key] = value;
  }
  return out;
}
}  // namespace detail

struct TrainOutput {
  int64_t global_step = 0;
  double training_loss = 0;
  Metrics metrics;  // train_runtime, train_samples_per_second, train_loss, ...
};

template <class Model, class Dataset>
class Trainer {
 public:
  using Loader = DataLoader<Dataset>;
  using Batch = typename Loader::BatchType;
  // The mean loss of one batch, and optionally its logits and labels for
  // compute_metrics and predict (trainer_outputs.h); a function returning
  // the loss tensor alone fits too.
  using LossFunction = std::function<ModelOutput(Model&, const Batch&)>;

  // `options`: Accelerator settings beyond those the arguments set;
  // `communicator`: run on these processes (tests use thread ranks),
  // default the launched job's.
  Trainer(Model model, TrainingArguments args, Dataset train_dataset, LossFunction loss,
          std::optional<Dataset> eval_dataset = std::nullopt, AcceleratorOptions options = {},
          std::shared_ptr<Communicator> communicator = nullptr)
      : model_(std::move(model)),
        loss_(std::move(loss)),
        accelerator_(make_accelerator(args, std::move(options), std::move(communicator))),
        loop_(args, *accelerator_) {
    set_seed(args.seed());
    set_up(args, std::move(train_dataset), std::move(eval_dataset));
  }

  // Hugging Face's model_init: the Trainer builds the model, inside
  // accelerator().zero3_init(), so that under ZeRO stage 3 with
  // zero3_init_flag (FSDP: cpu_ram_efficient_loading) only the main process
  // ever holds its whole weights (docs/sharding.md). The seed is set before
  // it runs, and again after, so training is the same as with a model the
  // program built after set_seed(args.seed()).
  // (A callable returning a Model; not a Model, whose holder's operator()
  // would be asked about forward().)
  template <
      class ModelInit,
      std::enable_if_t<std::conjunction_v<std::negation<std::is_convertible<ModelInit, Model>>,
                                          std::is_invocable_r<Model, ModelInit&>>,
                       int> = 0>
  Trainer(ModelInit model_init, TrainingArguments args, Dataset train_dataset, LossFunction loss,
          std::optional<Dataset> eval_dataset = std::nullopt, AcceleratorOptions options = {},
          std::shared_ptr<Communicator> communicator = nullptr)
      : model_(nullptr),
        loss_(std::move(loss)),
        accelerator_(make_accelerator(args, std::move(options), std::move(communicator))),
        loop_(args, *accelerator_) {
    set_seed(args.seed());
    {
      auto init = accelerator_->zero3_init();
      model_ = model_init();
    }
    set_seed(args.seed());  // as when the program built the model before the Trainer
    set_up(args, std::move(train_dataset), std::move(eval_dataset));
  }

  // Trains for the arguments' epochs or max_steps, from resume_from_checkpoint
  // when given. Collective: every process calls it.
  TrainOutput train() {
    loop_.refuse_checkpoints_it_cannot_save();
    if (auto folder = loop_.checkpoint_to_resume()) {
      TrainerLoop::refuse_weights_only_checkpoint(*folder);
      accelerator_->load_state(*folder);
    }
    loop_.begin_train();
    model_->train();
    const auto parameters = model_->parameters();
    const TrainerControl& control = loop_.control();
    std::vector<Batch> window;  // with count_items_with: the accumulation window's batches
    while (!loop_.should_stop_training()) {
      loop_.begin_epoch();
      bool step_begun = false;
      for (auto& batch : *train_loader_) {
        if (!step_begun) loop_.begin_step();
        step_begun = true;
        if (count_items_) {
          window.push_back(batch);
          if (static_cast<int>(window.size()) < accelerator_->gradient_accumulation_steps() &&
              !train_loader_->end_of_dataloader()) {
            continue;
          }
          train_window(window);
          window.clear();
        } else {
          auto micro_step = accelerator_->accumulate();
          at::Tensor loss = training_loss(batch);
          accelerator_->backward(loss);
          loop_.add_loss(loss, detail::batch_rows(batch));
          if (!accelerator_->sync_gradients()) continue;
        }
        optimizer_step(parameters);
        step_begun = false;
        if (loop_.should_stop_training() || control.should_epoch_stop) break;
      }
      // As in Hugging Face, also when max_steps or a callback ends the epoch
      // part-way: an "epoch" strategy then logs, evaluates or saves the last step.
      loop_.end_epoch();
      evaluate_and_save_if_due();
    }
    if (auto best = loop_.best_checkpoint_to_load()) load_best_model(*best);
    loop_.remove_all_but_best_checkpoint();
    TrainOutput output;
    output.metrics = loop_.end_train();
    output.global_step = loop_.state().global_step;
    output.training_loss = output.metrics["train_loss"];
    return output;
  }

  // The evaluation data's mean loss (each sample once, whatever the process
  // count), its exponential, and compute_metrics' metrics, prefixed "eval_".
  // Callbacks see on_evaluate. Collective.
  Metrics evaluate() {
    if (!eval_loader_) throw ConfigError("Trainer::evaluate: no eval_dataset was given");
    Metrics metrics = evaluation_loop(*eval_loader_, "eval", compute_metrics_ != nullptr).metrics;
    loop_.report_evaluation(metrics);
    return metrics;
  }

  // Predictions (the logits, or preprocess_logits_for_metrics' result) for
  // every sample of `dataset` in order, its labels, and metrics prefixed
  // "test_" (the loss when the function returns one, compute_metrics' when
  // set). Callbacks see on_predict. Collective. The dataset's loader stays
  // prepared (it counts among the loaders of later checkpoints).
  PredictionOutput predict(Dataset dataset) {
    predict_loaders_.push_back(std::make_unique<Loader>(
        std::move(dataset),
        loader_options(loop_.args().per_device_eval_batch_size(), loop_.args())));
    accelerator_->prepare(*predict_loaders_.back());
    PredictionOutput output = evaluation_loop(*predict_loaders_.back(), "test", /*collect=*/true);
    loop_.report_prediction(output.metrics);
    return output;
  }

  // Hugging Face's compute_metrics, run on the gathered predictions of
  // every evaluation (all processes, the same result on each).
  Trainer& compute_metrics(ComputeMetrics function) {
    compute_metrics_ = std::move(function);
    return *this;
  }
  // What evaluation keeps of each batch's logits, e.g. their argmax.
  Trainer& preprocess_logits_for_metrics(PreprocessLogits function) {
    preprocess_logits_ = std::move(function);
    return *this;
  }

  // The model's weights (model.safetensors) in `directory`, default
  // output_dir. Collective; the main process writes.
  std::vector<std::string> save_model(const std::optional<std::string>& directory = std::nullopt) {
    return accelerator_->save_model(model_, directory.value_or(loop_.args().output_dir()));
  }

  // Hugging Face's num_items_in_batch. With `count` set, the loss function
  // returns the SUM of its batch's per-item losses (e.g. cross_entropy with
  // reduction kSum and ignore_index -100) and `count` the batch's items (e.g.
  // its labels other than -100). Each optimizer step's loss is then the sum
  // over the accumulation window on every process divided by the window's
  // items on every process, so that accumulating batches of different
  // lengths trains as the one big batch would; evaluation divides each
  // batch's sum by its count.
  void count_items_with(std::function<int64_t(const Batch&)> count) {
    count_items_ = std::move(count);
  }

  void add_callback(std::shared_ptr<TrainerCallback> callback) {
    loop_.add_callback(std::move(callback));
  }
  Accelerator& accelerator() { return *accelerator_; }
  Model& model() { return model_; }
  // The optimizer args.optim chose (an accelerate::Optimizer<...>).
  torch::optim::Optimizer& optimizer() { return *optimizer_.optimizer; }
  const TrainerState& state() const { return loop_.state(); }
  const TrainingArguments& args() const { return loop_.args(); }

 private:
  static std::unique_ptr<Accelerator> make_accelerator(const TrainingArguments& args,
                                                       AcceleratorOptions options,
                                                       std::shared_ptr<Communicator> communicator) {
    options = TrainerLoop::accelerator_options(args, std::move(options));
    return communicator ? std::make_unique<Accelerator>(std::move(communicator), std::move(options))
                        : std::make_unique<Accelerator>(std::move(options));
  }
  static DataLoaderOptions loader_options(int64_t batch_size, const TrainingArguments& args) {
    return DataLoaderOptions(static_cast<size_t>(batch_size))
        .num_workers(static_cast<size_t>(args.dataloader_num_workers()));
  }

  void set_up(const TrainingArguments& args, Dataset train_dataset,
              std::optional<Dataset> eval_dataset) {
    train_loader_ = std::make_unique<Loader>(
        std::move(train_dataset),
        loader_options(args.per_device_train_batch_size(), args).shuffle(true).seed(args.seed()));
    optimizer_ = detail::make_trainer_optimizer(*model_, args);
    accelerator_->prepare(model_, *optimizer_.prepared, *train_loader_);
    if (eval_dataset) {
      eval_loader_ = std::make_unique<Loader>(
          std::move(*eval_dataset), loader_options(args.per_device_eval_batch_size(), args));
      accelerator_->prepare(*eval_loader_);
    }
    loop_.plan(static_cast<int64_t>(train_loader_->size()));
    scheduler_ = std::make_unique<Scheduler<WarmupSchedule>>(
        *optimizer_.optimizer, args.lr_scheduler_type(), loop_.warmup_steps(),
        loop_.state().max_steps, args.lr_scheduler_kwargs());
    accelerator_->prepare(*scheduler_);
    accelerator_->register_for_checkpointing(loop_);
    if (args.lr_scheduler_type() == SchedulerType::kReduceLROnPlateau) {
      plateau_ =
          std::make_unique<ReduceLROnPlateau>(*optimizer_.optimizer, args.lr_scheduler_kwargs());
      accelerator_->register_for_checkpointing(*plateau_);
    }
  }

  at::Tensor training_loss(const Batch& batch) {
    at::Tensor loss = loss_(model_, batch).loss;
    if (!loss.defined()) throw Error("Trainer: the model function returned no loss");
    return loss;
  }

  void optimizer_step(const std::vector<at::Tensor>& parameters) {
    double norm = std::numeric_limits<double>::quiet_NaN();
    // Under DeepSpeed its gradient_clipping (filled from max_grad_norm)
    // clips instead, and the norm it measured is logged, as in Hugging
    // Face's Trainer.
    if (accelerator_->distributed_type() == DistributedType::kDeepSpeed) {
      norm = accelerator_->deepspeed_grad_norm().value_or(norm);
    } else if (loop_.args().max_grad_norm() > 0) {
      norm = accelerator_->clip_grad_norm_(parameters, loop_.args().max_grad_norm());
    }
    optimizer_.optimizer->step();
    // The rate this step ran with, logged as transformers 5 logs it (read
    // before the scheduler moves it on).
    const double learning_rate = optimizer_.optimizer->param_groups()[0].options().get_lr();
    scheduler_->step();
    optimizer_.zero_grad();
    loop_.end_step(norm, learning_rate);
    evaluate_and_save_if_due();
  }

  // One accumulation window under count_items_with: the micro-batches'
  // summed losses over the window's items on every process. The Trainer
  // decides the sync itself (the loader has already yielded the window's
  // last batch while the first ones run).
  void train_window(const std::vector<Batch>& window) {
    int64_t local = 0;
    for (const auto& batch : window) local += count_items_(batch);
    at::Tensor count = at::full({1}, static_cast<double>(local), at::kDouble);
    const double items = accelerator_->reduce(count.to(accelerator_->device()), ReduceOp::kSum)
                             .template item<double>();
    // backward() divides by the accumulation steps, and the processes'
    // gradients are averaged: both undone, so the gradient is sum / items.
    const double scale = items > 0 ? static_cast<double>(accelerator_->num_processes()) *
                                         accelerator_->gradient_accumulation_steps() / items
                                   : 0.0;
    for (std::size_t i = 0; i < window.size(); ++i) {
      const bool last = i + 1 == window.size();
      accelerator_->gradient_state()->set_sync_gradients(last);
      std::optional<ScopeGuard> hold_sync;
      if (!last) hold_sync.emplace(accelerator_->no_sync());
      const at::Tensor loss = training_loss(window[i]) * scale;
      accelerator_->backward(loss);
      loop_.add_loss(loss, detail::batch_rows(window[i]));
    }
  }

  // Hugging Face's _maybe_log_save_evaluate, after the log: the flags the
  // arguments and the callbacks set.
  void evaluate_and_save_if_due() {
    TrainerControl& control = loop_.control();
    if (control.should_evaluate) {
      if (eval_loader_) {
        const Metrics metrics = evaluate();
        const bool new_best = loop_.track_best(metrics);
        // transformers: under "best" an evaluation decides the save, over
        // what a callback asked for.
        if (loop_.args().save_strategy() == SaveStrategy::kBest) control.should_save = new_best;
        // As transformers' Trainer: the plateau schedule steps on the
        // training loop's evaluations, on metric_for_best_model (default
        // eval_loss).
        if (plateau_) {
          const std::string key = loop_.args().best_metric_key().value_or("eval_loss");
          const auto found = metrics.find(key);
          if (found == metrics.end()) {
            throw ConfigError("lr_scheduler_type reduce_lr_on_plateau: the evaluation has no '" +
                              key + "' metric");
          }
          plateau_->step(found->second);
        }
      } else {
        control.should_evaluate = false;
      }
    }
    if (control.should_save) loop_.save_checkpoint(*model_);
  }

  // The best checkpoint's weights into the prepared model through
  // load_state (sharded ZeRO/FSDP checkpoints too); the Trainer's step
  // counters stay those of the end of the run.
  void load_best_model(const std::string& folder) {
    if (accelerator_->is_main_process()) {
      std::cout << "Loading best model from " << folder
                << " (score: " << loop_.state().best_metric.value_or(std::nan("")) << ")."
                << std::endl;
    }
    if (loop_.args().save_only_model()) {  // the folder holds the weights alone
      load_model(*model_, folder);
      return;
    }
    loop_.keep_counters_on_load(true);
    try {
      accelerator_->load_state(folder);
    } catch (...) {
      loop_.keep_counters_on_load(false);
      throw;
    }
    loop_.keep_counters_on_load(false);
  }

  // Predictions and labels of different lengths (dynamic padding) are
  // padded with -100 along their second dimension, across the processes
  // before gathering and across the batches when concatenated, as Hugging
  // Face's evaluation loop does.
  PredictionOutput evaluation_loop(Loader& loader, const std::string& prefix, bool collect) {
    const bool was_training = model_->is_training();
    model_->eval();
    const auto started = std::chrono::steady_clock::now();
    detail::EvaluationLoss losses(loop_.args().logging_nan_inf_filter());
    bool has_loss = false;
    int64_t steps = 0;  // batches on this process: each process runs as many
    std::vector<at::Tensor> predictions, labels;
    const auto pad = [this](at::Tensor t) {
      return t.dim() >= 2
                 ? accelerator_->pad_across_processes(t.contiguous(), 1, detail::kEvalPaddingIndex)
                 : t.contiguous();
    };
    {
      torch::NoGradGuard no_grad;
      for (auto& batch : loader) {
        ModelOutput output = loss_(model_, batch);
        const int64_t rows = detail::batch_rows(batch);
        has_loss = output.loss.defined();
        // One copy of the batch's loss per sample (ones without a loss), so
        // that the samples that pad the last batch are dropped with them.
        at::Tensor loss =
            has_loss
                ? output.loss.detach().to(at::kDouble).reshape({1})
                : at::ones({1},
                           at::TensorOptions().dtype(at::kDouble).device(accelerator_->device()));
        // A summed loss (count_items_with) becomes the batch's mean per item.
        if (has_loss && count_items_)
          loss = loss / static_cast<double>(std::max<int64_t>(1, count_items_(batch)));
        losses.add(accelerator_->gather_for_metrics(loss.expand({rows}).contiguous()));
        if (collect && output.logits.defined()) {
          at::Tensor label = output.labels.defined() ? output.labels : detail::batch_labels(batch);
          if (label.defined()) label = pad(label.detach());
          at::Tensor prediction = pad(output.logits.detach());
          if (preprocess_logits_) prediction = pad(preprocess_logits_(prediction, label));
          predictions.push_back(accelerator_->gather_for_metrics(prediction).cpu());
          if (label.defined()) labels.push_back(accelerator_->gather_for_metrics(label).cpu());
        }
        loop_.prediction_step();
        ++steps;
      }
    }
    if (was_training) model_->train();
    PredictionOutput result;
    result.predictions = detail::pad_and_concatenate(predictions);
    result.label_ids = detail::pad_and_concatenate(labels);
    if (compute_metrics_ && result.predictions.defined() && result.label_ids.defined()) {
      result.metrics = detail::prefixed(
          compute_metrics_(EvalPrediction{result.predictions, result.label_ids}), prefix);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (has_loss) {
      const double loss = losses.mean().value_or(std::nan(""));
      result.metrics[prefix + "_loss"] = loss;
      result.metrics[prefix + "_perplexity"] = std::exp(loss);
    }
    detail::add_speed_metrics(result.metrics, prefix, seconds,
                              static_cast<double>(losses.samples()), static_cast<double>(steps));
    return result;
  }

  Model model_;
  LossFunction loss_;
  std::unique_ptr<Accelerator> accelerator_;
  TrainerLoop loop_;
  std::unique_ptr<Loader> train_loader_, eval_loader_;
  std::vector<std::unique_ptr<Loader>> predict_loaders_;  // prepared, so they outlive predict()
  ComputeMetrics compute_metrics_;
  PreprocessLogits preprocess_logits_;
  detail::TrainerOptimizer optimizer_;
  std::unique_ptr<Scheduler<WarmupSchedule>> scheduler_;
  std::unique_ptr<ReduceLROnPlateau> plateau_;        // lr_scheduler_type reduce_lr_on_plateau
  std::function<int64_t(const Batch&)> count_items_;  // count_items_with
};

}  // namespace accelerate
