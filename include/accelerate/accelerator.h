// The Accelerator: Hugging Face Accelerate's facade for a training loop.
//
//   accelerate::Accelerator accelerator;                       // settings from the launcher
//   accelerator.prepare(model, optimizer, train_loader);       // in place
//   for (auto& batch : train_loader) {
//     optimizer.zero_grad();
//     auto loss = torch::nll_loss(model->forward(batch.data), batch.target);
//     accelerator.backward(loss);                              // + gradient sync
//     optimizer.step();
//   }
//
// It is a thin layer over small parts: the JobState and Communicator
// (distributed/), a GradientReducer per model (parallel/), the data loaders'
// sharding (data/), and the GradientState shared with prepared optimizers and
// schedulers. prepare() works in place: models stay the user's own
// ModuleHolders (so unwrap_model is the identity), loaders are sharded,
// optimizers and schedulers declared as accelerate::Optimizer<...> /
// accelerate::Scheduler<...> get Accelerate's stepping semantics.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>

#include "accelerate/arg.h"
#include "accelerate/autocast.h"
#include "accelerate/checkpointing.h"
#include "accelerate/collectives.h"
#include "accelerate/communicator.h"
#include "accelerate/data_loader.h"
#include "accelerate/grad_scaler.h"
#include "accelerate/gradient_reducer.h"
#include "accelerate/gradient_state.h"
#include "accelerate/job_state.h"
#include "accelerate/logging.h"
#include "accelerate/optimizer.h"
#include "accelerate/process_control.h"
#include "accelerate/project_configuration.h"
#include "accelerate/scheduler.h"
#include "accelerate/tracking.h"

namespace accelerate {

// Accelerate's GradientAccumulationPlugin.
struct GradientAccumulationPlugin {
  // Micro-batches per optimizer step.
  ACCELERATE_ARG(int, num_steps) = 1;
  // Schedulers advance only with real optimizer steps (see scheduler.h).
  ACCELERATE_ARG(bool, adjust_scheduler) = true;
  // Always sync (and step) on a loader's last batch, even mid-accumulation.
  ACCELERATE_ARG(bool, sync_with_dataloader) = true;
  // All-reduce gradients on every micro-batch (uses less memory on some
  // setups), while still stepping only every num_steps.
  ACCELERATE_ARG(bool, sync_each_batch) = false;
};

struct AcceleratorOptions {
  // Move prepared models to device() and loaders' batches too.
  ACCELERATE_ARG(bool, device_placement) = true;
  // "no", "bf16" or "fp16" (fp16 needs CUDA; see docs/mixed-precision.md);
  // default: ACCELERATE_MIXED_PRECISION, else "no". With bf16/fp16 the thread
  // that constructs the Accelerator runs under autocast until it is
  // destroyed (C++ has no forward hooks to wrap each model's forward), except
  // inside backward(); fp16 also scales the loss (grad_scaler_kwargs).
  ACCELERATE_ARG(std::optional<std::string>, mixed_precision);
  // Accelerate's AutocastKwargs: enabled=false keeps autocast off (autocast()
  // scopes still work); cache_enabled as torch.autocast's.
  ACCELERATE_ARG(AutocastOptions, autocast_kwargs);
  // Accelerate's GradScalerKwargs, used with mixed_precision "fp16".
  ACCELERATE_ARG(GradScalerOptions, grad_scaler_kwargs);
  // Shortcut for gradient_accumulation_plugin.num_steps; default:
  // ACCELERATE_GRADIENT_ACCUMULATION_STEPS, else 1.
  ACCELERATE_ARG(std::optional<int>, gradient_accumulation_steps);
  ACCELERATE_ARG(GradientAccumulationPlugin, gradient_accumulation_plugin);
  // Force the CPU (default: ACCELERATE_USE_CPU).
  ACCELERATE_ARG(std::optional<bool>, cpu);
  // Sharding of prepared loaders (split_batches, dispatch_batches, ...).
  ACCELERATE_ARG(DataLoaderConfiguration, dataloader_config);
  // DistributedDataParallelKwargs: bucket_cap_mb, find_unused_parameters, ...
  ACCELERATE_ARG(GradientSyncOptions, ddp_options);
  // InitProcessGroupKwargs (backend, timeout) and debug mode.
  ACCELERATE_ARG(JobOptions, job_options);
  // Step schedulers together with optimizers (Accelerate's
  // step_scheduler_with_optimizer); false: schedulers step on every call.
  ACCELERATE_ARG(bool, step_scheduler_with_optimizer) = true;
  // Not in Accelerate: fix glibc malloc's thresholds so a step's freed
  // buffers are reused instead of unmapped (malloc_tuning.h; up to 1.3x
  // faster steps on CPU). Process-wide, applied by the constructor that
  // reads the environment; GLIBC_TUNABLES malloc settings take precedence.
  ACCELERATE_ARG(bool, tune_malloc) = true;
  // Experiment trackers (docs/tracking.md): "tensorboard", "jsonl", "csv",
  // "all", or the name() of one of `trackers`. Files go to the project's
  // logging_dir/project_name; only the main process writes.
  ACCELERATE_ARG(std::vector<std::string>, log_with);
  // User trackers (GeneralTracker subclasses), used when log_with names them.
  ACCELERATE_ARG(std::vector<std::shared_ptr<GeneralTracker>>, trackers);
  // ---- BEGIN checkpoint options (checkpoint area) ----
  // Accelerate's ProjectConfiguration: project_dir, logging_dir, automatic
  // checkpoint naming, total_limit, iteration (project_configuration.h).
  ACCELERATE_ARG(ProjectConfiguration, project_config);
  // Accelerate's project_dir argument; overrides project_config.project_dir.
  ACCELERATE_ARG(std::optional<std::string>, project_dir);
  // How save_state writes: fsync (default on) and a stage observer
  // (checkpointing.h).
  ACCELERATE_ARG(CheckpointOptions, checkpoint_options);
  // ---- END checkpoint options ----
};

class Accelerator {
 public:
  // Settings from the environment (launcher, torchrun, Slurm, MPI) and
  // `options`; connects to the job's other processes.
  explicit Accelerator(AcceleratorOptions options = {});
  // Joins an existing communicator instead (tests that run ranks as threads,
  // custom rendezvous); its JobState is used as is.
  explicit Accelerator(std::shared_ptr<Communicator> communicator,
                       AcceleratorOptions options = {});
  ~Accelerator();
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  // ---- Where and who --------------------------------------------------------
  const JobState& state() const { return *job_; }
  torch::Device device() const;
  int num_processes() const { return job_->world_size; }
  int process_index() const { return job_->rank; }
  int local_process_index() const { return job_->local_rank; }
  bool is_main_process() const { return job_->is_main_process(); }
  bool is_local_main_process() const { return job_->is_local_main_process(); }
  bool is_last_process() const { return job_->is_last_process(); }
  // "NO" (one process), "MULTI_CPU" or "MULTI_GPU", as in Accelerate.
  std::string distributed_type() const;
  const std::string& mixed_precision() const { return mixed_precision_; }
  Communicator& communicator() { return *comm_; }

  // ---- Gradient accumulation -----------------------------------------------
  bool sync_gradients() const { return gradient_state_->sync_gradients(); }
  int gradient_accumulation_steps() const { return gradient_state_->num_steps(); }
  // Micro-steps counted by accumulate().
  int64_t step() const { return step_; }
  bool optimizer_step_was_skipped() const { return gradient_state_->optimizer_step_was_skipped(); }

  // ---- Mixed precision (docs/mixed-precision.md) ---------------------------
  // A scope with the Accelerator's autocast settings (does nothing for
  // mixed precision "no"); e.g. for forward passes on another thread, or
  // AutocastOptions().enabled(false) for an fp32 island.
  [[nodiscard]] AutocastGuard autocast() const { return autocast(options_.autocast_kwargs()); }
  [[nodiscard]] AutocastGuard autocast(const AutocastOptions& options) const;
  // The loss scaler (fp16 only; null otherwise).
  const std::shared_ptr<GradScaler>& scaler() const { return scaler_; }
  // Divides the prepared optimizers' gradients by the loss scale, once per
  // step (later calls in the same step do nothing). clip_grad_norm_ and
  // clip_grad_value_ call it first. Nothing without fp16.
  void unscale_gradients();
  const std::shared_ptr<GradientState>& gradient_state() const { return gradient_state_; }

  // ---- prepare --------------------------------------------------------------
  // Prepares each argument in place, in any number and order: models
  // (ModuleHolder or Module), accelerate::Optimizer<...>, plain
  // torch::optim optimizers (only without gradient accumulation),
  // accelerate::Scheduler<...>, and accelerate::DataLoader<...>. Preparing
  // the same object twice does nothing the second time.
  template <class... Objects>
  void prepare(Objects&... objects) {
    (prepare_one(objects), ...);
  }

  // ---- The step -------------------------------------------------------------
  // loss / gradient_accumulation_steps (times the loss scale with fp16),
  // backward with autocast off, then gradient sync of every prepared model
  // (overlapped with backward, finished before returning).
  void backward(const at::Tensor& loss);

  // RAII scope of one micro-batch (Accelerate's `with accumulate(model)`).
  class AccumulateScope;
  [[nodiscard]] AccumulateScope accumulate();
  // RAII scope in which prepared models skip gradient sync.
  class NoSyncScope;
  [[nodiscard]] NoSyncScope no_sync();
  // Forces the next backward() to sync (Accelerate's trigger_sync_in_backward).
  void trigger_sync_in_backward();

  // Clips `parameters`' gradients (unscaled first with fp16); returns the
  // total norm, the same on every rank once gradients are synced.
  double clip_grad_norm_(const std::vector<at::Tensor>& parameters, double max_norm,
                         double norm_type = 2.0);
  void clip_grad_value_(const std::vector<at::Tensor>& parameters, double clip_value);

  // Resumes mid-epoch: the loader's next pass starts at batch `num_batches`
  // (Accelerate's skip_first_batches; here the loader itself is returned).
  template <class Loader>
  Loader& skip_first_batches(Loader& loader, size_t num_batches) {
    static_assert(std::is_base_of<DataLoaderBase, Loader>::value, "needs an accelerate::DataLoader");
    loader.skip_first_batches(num_batches);
    return loader;
  }

  // The model itself: prepare() does not wrap models.
  template <class Model>
  Model& unwrap_model(Model& model) { return model; }

  // ---- BEGIN checkpoints (checkpoint area; src/accelerator/accelerator_checkpoint.cpp) ----
  // Layout and format: docs/checkpoint-format.md.
  const ProjectConfiguration& project_configuration() const { return project_config_; }
  const std::optional<std::string>& project_dir() const { return project_config_.project_dir(); }
  std::optional<std::string> logging_dir() const { return project_config_.effective_logging_dir(); }
  // The number the next automatic checkpoint gets.
  int64_t save_iteration() const { return project_config_.iteration(); }

  // Saves the training state: prepared models (model.safetensors,
  // model_1.safetensors, ...), optimizers, schedulers, the loss scaler,
  // loader positions, every process's random states, step counters and
  // registered objects. Default folder (automatic_checkpoint_naming):
  // {project_dir}/checkpoints/checkpoint_{iteration}, then iteration + 1 and
  // the oldest beyond total_limit are deleted. Collective; crash-safe (a
  // killed save leaves earlier checkpoints intact and is never loaded).
  // An existing checkpoint in an explicit `output_dir` is replaced. Returns
  // the folder written.
  std::string save_state(const std::optional<std::string>& output_dir = std::nullopt);
  // Restores a save_state checkpoint into the prepared objects (call after
  // prepare(), with no loader mid-iteration). Default: the newest complete
  // checkpoint under {project_dir}/checkpoints. Throws Error naming the file
  // (and tensor) for a missing file, a shape mismatch, a different world size
  // or different numbers of prepared objects. Returns the folder loaded.
  std::string load_state(const std::optional<std::string>& input_dir = std::nullopt);
  // Adds objects to save_state/load_state (custom_checkpoint_{i}.bin, in
  // registration order): anything with save(OutputArchive&) const and
  // load(InputArchive&), e.g. torch modules or optimizers. They must outlive
  // the Accelerator.
  template <class... Objects>
  void register_for_checkpointing(Objects&... objects) {
    (custom_objects_.push_back(make_checkpoint_object(objects)), ...);
  }
  // Hooks run on every process at the start of save_state / load_state (see
  // SaveStatePreHook / LoadStatePreHook).
  HookHandle register_save_state_pre_hook(SaveStatePreHook hook);
  HookHandle register_load_state_pre_hook(LoadStatePreHook hook);

  // accelerate::save_model on the main process (model.safetensors or
  // shards), between two waits for every process, as Accelerate. Returns the
  // files written (empty on other processes).
  std::vector<std::string> save_model(const torch::nn::Module& model,
                                      const std::string& save_directory,
                                      const SaveModelOptions& options = {});
  template <class Impl>
  std::vector<std::string> save_model(const torch::nn::ModuleHolder<Impl>& model,
                                      const std::string& save_directory,
                                      const SaveModelOptions& options = {}) {
    return save_model(*model.ptr(), save_directory, options);
  }
  // ---- END checkpoints ----

  // ---- Tracking (docs/tracking.md) -----------------------------------------
  // Starts the log_with trackers for a run named `project_name` and records
  // `config` (TensorBoard: hparams). Every process may call these; only the
  // main process writes.
  void init_trackers(const std::string& project_name, const TrackerConfig& config = {}) {
    trackers_->init_trackers(project_name, config);
  }
  // Logs values at `step` (default: the number of earlier log() calls).
  void log(const TrackerValues& values, std::optional<int64_t> step = std::nullopt) {
    trackers_->log(values, step);
  }
  // Flushes and closes every tracker (also done by the destructor).
  void end_training() { trackers_->end_training(); }
  GeneralTracker& get_tracker(const std::string& name) { return trackers_->get_tracker(name); }
  // A logger that knows this job's ranks (main_process_only / in_order).
  Logger get_logger(const std::string& name, LoggerOptions options = {}) const {
    return accelerate::get_logger(name, options.communicator(comm_));
  }

  // ---- Collectives with Accelerate's names ---------------------------------
  at::Tensor gather(const at::Tensor& tensor) { return accelerate::gather(*comm_, tensor); }
  // gather() that drops the samples even_batches duplicated on a loader's
  // last batch, so the result holds each dataset sample exactly once.
  at::Tensor gather_for_metrics(const at::Tensor& tensor);
  at::Tensor reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum, double scale = 1.0) {
    return accelerate::reduce(*comm_, tensor, op, scale);
  }
  at::Tensor pad_across_processes(const at::Tensor& tensor, int64_t dim = 0,
                                  int64_t pad_index = 0, bool pad_first = false) {
    return accelerate::pad_across_processes(*comm_, tensor, dim, pad_index, pad_first);
  }
  void wait_for_everyone() { comm_->barrier(); }
  template <class Fn>
  void main_process_first(Fn&& fn) { accelerate::main_process_first(*comm_, std::forward<Fn>(fn)); }
  template <class Fn>
  void local_main_process_first(Fn&& fn) {
    accelerate::local_main_process_first(*comm_, std::forward<Fn>(fn));
  }
  template <class... Args>
  void print(const Args&... args) const { accelerate::print(*job_, args...); }
  void set_trigger() { trigger_.set(); }
  bool check_trigger() { return trigger_.check(*comm_); }

  // Per-model reducers, for statistics and tests.
  const std::vector<std::unique_ptr<GradientReducer>>& reducers() const { return reducers_; }

 private:
  void prepare_module(torch::nn::Module& module);
  template <class Impl>
  void prepare_one(torch::nn::ModuleHolder<Impl>& holder) { prepare_module(*holder.ptr()); }
  void prepare_one(torch::nn::Module& module) { prepare_module(module); }
  void prepare_one(PreparedOptimizerBase& optimizer);
  void prepare_one(torch::optim::Optimizer& optimizer);
  void prepare_one(PreparedSchedulerBase& scheduler);
  void prepare_one(DataLoaderBase& loader);
  template <class T>
  std::enable_if_t<std::is_base_of<PreparedOptimizerBase, T>::value> prepare_one(T& optimizer) {
    prepare_one(static_cast<PreparedOptimizerBase&>(optimizer));
  }
  template <class T>
  std::enable_if_t<std::is_base_of<PreparedSchedulerBase, T>::value> prepare_one(T& scheduler) {
    prepare_one(static_cast<PreparedSchedulerBase&>(scheduler));
  }
  template <class T>
  std::enable_if_t<std::is_base_of<DataLoaderBase, T>::value> prepare_one(T& loader) {
    prepare_one(static_cast<DataLoaderBase&>(loader));
  }
  void configure_from(const Environment& env);
  void configure_mixed_precision();
  void set_models_sync(bool sync);
  void begin_micro_step();
  void end_micro_step();

  AcceleratorOptions options_;
  std::shared_ptr<const JobState> job_;
  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<GradientState> gradient_state_ = std::make_shared<GradientState>();
  std::string mixed_precision_ = "no";
  // Autocast around the constructing thread's loop (mixed precision only).
  std::optional<AutocastGuard> ambient_autocast_;
  std::shared_ptr<GradScaler> scaler_;
  // Prepared objects in prepare() order (checkpoints save them in this order).
  std::vector<torch::nn::Module*> prepared_modules_;
  std::vector<torch::optim::Optimizer*> prepared_optimizers_;
  std::vector<PreparedSchedulerBase*> prepared_schedulers_;
  std::vector<DataLoaderBase*> loaders_;
  std::vector<std::unique_ptr<GradientReducer>> reducers_;
  // ---- BEGIN checkpoint state (checkpoint area) ----
  static ProjectConfiguration resolve_project_config(const AcceleratorOptions& options);
  void restore_state_from(const std::string& folder);
  // options_ is declared (so initialised) before this.
  ProjectConfiguration project_config_ = resolve_project_config(options_);
  std::vector<CheckpointObject> custom_objects_;
  // Shared with HookHandles, which may outlive the Accelerator.
  std::shared_ptr<HookRegistry<SaveStatePreHook>> save_state_pre_hooks_ =
      std::make_shared<HookRegistry<SaveStatePreHook>>();
  std::shared_ptr<HookRegistry<LoadStatePreHook>> load_state_pre_hooks_ =
      std::make_shared<HookRegistry<LoadStatePreHook>>();
  // ---- END checkpoint state ----
  std::unique_ptr<Trackers> trackers_;
  Trigger trigger_;
  int64_t step_ = 0;
  bool force_sync_ = false;
  bool in_no_sync_ = false;
};

class Accelerator::AccumulateScope {
 public:
  explicit AccumulateScope(Accelerator* accelerator) : accelerator_(accelerator) {}
  AccumulateScope(AccumulateScope&& other) noexcept : accelerator_(other.accelerator_) {
    other.accelerator_ = nullptr;
  }
  AccumulateScope(const AccumulateScope&) = delete;
  ~AccumulateScope() {
    if (accelerator_) accelerator_->end_micro_step();
  }

 private:
  Accelerator* accelerator_;
};

class Accelerator::NoSyncScope {
 public:
  explicit NoSyncScope(Accelerator* accelerator) : accelerator_(accelerator) {}
  NoSyncScope(NoSyncScope&& other) noexcept : accelerator_(other.accelerator_) {
    other.accelerator_ = nullptr;
  }
  NoSyncScope(const NoSyncScope&) = delete;
  ~NoSyncScope();

 private:
  Accelerator* accelerator_;
};

}  // namespace accelerate
