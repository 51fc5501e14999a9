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

#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "accelerate/accelerator.h"
#include "accelerate/data_loader.h"
#include "accelerate/detail/trainer_loop.h"
#include "accelerate/detail/trainer_optimizer.h"
#include "accelerate/lr_schedule.h"
#include "accelerate/optimizer.h"
#include "accelerate/random.h"
#include "accelerate/reduce_lr_on_plateau.h"
#include "accelerate/scheduler.h"

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
    while (!loop_.done()) {
      bool whole_epoch = true;
      for (auto& batch : *train_loader_) {
        auto micro_step = accelerator_->accumulate();
        at::Tensor loss = loss_(model_, batch);
        accelerator_->backward(loss);
        loop_.add_loss(loss, detail::batch_rows(batch));
        if (!accelerator_->sync_gradients()) continue;
        optimizer_step(parameters);
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
        const at::Tensor loss = loss_(model_, batch).detach().to(at::kDouble).reshape({1});
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
  std::unique_ptr<ReduceLROnPlateau> plateau_;  // lr_scheduler_type reduce_lr_on_plateau
};

}  // namespace accelerate
