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
// on biases and LayerNorm weights), the learning-rate schedule, logging the mean loss every
// logging_steps, evaluation and checkpoints at their intervals (save_state, so resuming with
// resume_from_checkpoint continues exactly). docs/trainer.md.
#pragma once

#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "accelerate/accelerator.h"
#include "accelerate/data_loader.h"
#include "accelerate/detail/trainer_loop.h"
#include "accelerate/detail/trainer_optimizer.h"
#include "accelerate/lr_schedule.h"
#include "accelerate/optimizer.h"
#include "accelerate/random.h"
#include "accelerate/reduce_lr_on_plateau.h"
#include "accelerate/scheduler.h"
#include "accelerate/scope_guard.h"

namespace accelerate {

namespace detail {
// Samples in a batch: rows of its tensor or of its data.
inline int64_t batch_rows(const at::Tensor& batch) { return batch.dim() ? batch.size(0) : 1; }
template <class Data, class Target>
int64_t batch_rows(const torch::data::Example<Data, Target>& batch) {
  return batch_rows(batch.data);
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
  // The mean loss of one batch.
  using LossFunction = std::function<at::Tensor(Model&, const Batch&)>;

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
    if (auto folder = loop_.checkpoint_to_resume()) accelerator_->load_state(*folder);
    loop_.begin_train();
    model_->train();
    const auto parameters = model_->parameters();
    std::vector<Batch> window;  // with count_items_with: the accumulation window's batches
    while (!loop_.done()) {
      bool whole_epoch = true;
      for (auto& batch : *train_loader_) {
        if (count_items_) {
          window.push_back(batch);
          if (static_cast<int>(window.size()) < accelerator_->gradient_accumulation_steps() &&
              !train_loader_->end_of_dataloader()) {
            continue;
          }
          train_window(window);
          window.clear();
          optimizer_step(parameters);
        } else {
          auto micro_step = accelerator_->accumulate();
          at::Tensor loss = loss_(model_, batch);
          accelerator_->backward(loss);
          loop_.add_loss(loss, detail::batch_rows(batch));
          if (!accelerator_->sync_gradients()) continue;
          optimizer_step(parameters);
        }
        if (loop_.done()) {
          whole_epoch = train_loader_->end_of_dataloader();
          break;
        }
      }
      if (whole_epoch) act_on(loop_.end_epoch());
    }
    TrainOutput output;
    output.metrics = loop_.end_train();
    output.global_step = loop_.state().global_step;
    output.training_loss = output.metrics["train_loss"];
    return output;
  }

  // Mean loss over the evaluation data (each sample once, whatever the
  // process count) and its exponential. Collective.
  Metrics evaluate() {
    if (!eval_loader_) throw ConfigError("Trainer::evaluate: no eval_dataset was given");
    const bool was_training = model_->is_training();
    model_->eval();
    const auto started = std::chrono::steady_clock::now();
    double sum = 0;
    int64_t count = 0;
    {
      torch::NoGradGuard no_grad;
      for (auto& batch : *eval_loader_) {
        at::Tensor loss = loss_(model_, batch).detach().to(at::kDouble).reshape({1});
        // A summed loss (count_items_with) becomes the batch's mean per item.
        if (count_items_)
          loss = loss / static_cast<double>(std::max<int64_t>(1, count_items_(batch)));
        // One copy of the batch's loss per sample, so that the samples that
        // pad the last batch are dropped with them.
        const at::Tensor per_sample = loss.expand({detail::batch_rows(batch)}).contiguous();
        const at::Tensor gathered = accelerator_->gather_for_metrics(per_sample);
        sum += gathered.sum().template item<double>();
        count += gathered.numel();
      }
    }
    if (was_training) model_->train();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const double loss = count ? sum / static_cast<double>(count) : std::nan("");
    Metrics metrics{
        {"eval_loss", loss},
        {"eval_perplexity", std::exp(loss)},
        {"eval_runtime", seconds},
        {"eval_samples_per_second", static_cast<double>(count) / std::max(seconds, 1e-9)}};
    loop_.report_evaluation(metrics);
    return metrics;
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
    scheduler_->step();
    optimizer_.zero_grad();
    act_on(loop_.end_step(norm, optimizer_.optimizer->param_groups()[0].options().get_lr()));
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
      const at::Tensor loss = loss_(model_, window[i]) * scale;
      accelerator_->backward(loss);
      loop_.add_loss(loss, detail::batch_rows(window[i]));
    }
  }

  void act_on(TrainerLoop::Due due) {
    if (due.evaluate && eval_loader_) {
      const Metrics metrics = evaluate();
      // As transformers' Trainer: the plateau schedule steps on the training
      // loop's evaluations only (metric_for_best_model's default, eval_loss).
      if (plateau_) plateau_->step(metrics.at("eval_loss"));
    }
    if (due.save) loop_.save_checkpoint();
  }

  Model model_;
  LossFunction loss_;
  std::unique_ptr<Accelerator> accelerator_;
  TrainerLoop loop_;
  std::unique_ptr<Loader> train_loader_, eval_loader_;
  detail::TrainerOptimizer optimizer_;
  std::unique_ptr<Scheduler<WarmupSchedule>> scheduler_;
  std::unique_ptr<ReduceLROnPlateau> plateau_;        // lr_scheduler_type reduce_lr_on_plateau
  std::function<int64_t(const Batch&)> count_items_;  // count_items_with
};

}  // namespace accelerate
