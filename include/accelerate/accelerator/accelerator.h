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
// A thin layer over small parts: JobState and Communicator, the parallelism
// engine chosen for the job (data parallelism, or ZeRO's shards), the
// loaders' sharding, and the GradientState that prepared optimizers and
// schedulers share. prepare() works in place (docs/accelerator.md).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>

#include "accelerate/accelerator/accelerator_options.h"
#include "accelerate/accelerator/gradient_state.h"
#include "accelerate/accelerator/optimizer.h"
#include "accelerate/accelerator/scheduler.h"
#include "accelerate/common/distributed_type.h"
#include "accelerate/common/scope_guard.h"
#include "accelerate/data/data_loader.h"
#include "accelerate/distributed/collectives.h"
#include "accelerate/distributed/communicator.h"
#include "accelerate/distributed/process_control.h"
#include "accelerate/memory/empty_weights.h"
#include "accelerate/nn/sequence_parallel.h"
#include "accelerate/nn/tensor_parallel.h"
#include "accelerate/tracking/logging.h"

namespace accelerate {

class ParallelEngine;       // internal
struct EngineChoice;        // internal
class TensorParallelParts;  // internal
namespace distributed {
class DeviceMesh;  // internal
}  // namespace distributed

class Accelerator {
 public:
  // Settings from `options`, then the environment (launcher, torchrun, Slurm,
  // MPI); connects to the job's other processes.
  explicit Accelerator(AcceleratorOptions options = {});
  // Joins an existing communicator instead (ranks as threads in tests, custom
  // rendezvous); its JobState is used as is.
  explicit Accelerator(std::shared_ptr<Communicator> communicator, AcceleratorOptions options = {});
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
  DistributedType distributed_type() const;  // to_string(): "NO", "MULTI_CPU", ...
  MixedPrecision mixed_precision() const {
    return mixed_precision_;
  }  // to_string(): "no", "bf16", "fp16"
  Communicator& communicator() { return *comm_; }
  // This process's sequence-parallel group (ParallelismConfig's sp_size:
  // consecutive ranks; size 1 without sequence parallelism), for the model's
  // attention, loss and batch slicing (accelerate/nn/sequence_parallel.h).
  // Prepared data loaders give every rank of a group the same batches.
  const SequenceParallel& sequence_parallel() const { return sequence_parallel_; }
  // This process's tensor-parallel group (ParallelismConfig's tp_size:
  // consecutive ranks, the innermost dimension of the mesh; size 1 without
  // tensor parallelism). prepare() splits a model over it by the model's
  // own plan (accelerate/nn/tensor_parallel_plan.h); prepared loaders give every
  // rank of a group the same batches; clip_grad_norm_ counts each
  // replicated parameter once (docs/tensor-parallel.md). Its
  // sequence_parallel() is ParallelismConfig::tp_sequence_parallel, which
  // the models' plans read.
  const TensorParallel& tensor_parallel() const { return tensor_parallel_; }

  // ---- Gradient accumulation -----------------------------------------------
  bool sync_gradients() const { return gradient_state_->sync_gradients(); }
  int gradient_accumulation_steps() const { return gradient_state_->num_steps(); }
  int64_t step() const { return step_; }  // micro-steps counted by accumulate()
  bool optimizer_step_was_skipped() const { return gradient_state_->optimizer_step_was_skipped(); }

  // ---- Mixed precision (docs/mixed-precision.md) ---------------------------
  // A scope with the Accelerator's autocast settings (nothing without mixed
  // precision): forwards on other threads, or enabled(false) for fp32 islands.
  [[nodiscard]] AutocastGuard autocast() const { return autocast(options_.autocast_kwargs()); }
  [[nodiscard]] AutocastGuard autocast(const AutocastOptions& options) const;
  // The loss scaler (fp16 only; null otherwise).
  const std::shared_ptr<GradScaler>& scaler() const { return scaler_; }
  void unscale_gradients();  // once per step, fp16 only; clipping calls it first
  const std::shared_ptr<GradientState>& gradient_state() const { return gradient_state_; }

  // ---- prepare --------------------------------------------------------------
  // Prepares each argument in place, in any number and order: models,
  // accelerate::Optimizer<...> (plain torch optimizers only without
  // accumulation), accelerate::Scheduler<...>, accelerate::DataLoader<...>
  // (or a pointer to one). Preparing an object again does nothing. A
  // DeepSpeed config file is checked against the program when a call has
  // prepared an optimizer (prepare the loaders by then; docs/deepspeed-config.md).
  template <class... Objects>
  void prepare(Objects&... objects);
  // DeepSpeed's zero.Init (zero3_init_flag), FSDP's cpu_ram_efficient_loading:
  // at ZeRO stage 3 with either set, modules built under the guard hold no
  // weights on every process but the main one; prepare() gives each process
  // its shard (docs/sharding.md). Every process must call it; otherwise it
  // changes nothing.   { auto init = accelerator.zero3_init(); model = GPT(config); }
  [[nodiscard]] EmptyWeightsGuard zero3_init();

  // ---- The step -------------------------------------------------------------
  // loss / gradient_accumulation_steps (times the fp16 loss scale), backward
  // without autocast, and the prepared models' gradient sync, overlapped.
  void backward(const at::Tensor& loss);

  using AccumulateScope = ScopeGuard;  // one micro-batch (`with accumulate(model)`)
  [[nodiscard]] AccumulateScope accumulate();
  using NoSyncScope = ScopeGuard;  // prepared models skip gradient sync inside
  [[nodiscard]] NoSyncScope no_sync();
  // Forces the next backward() to sync (Accelerate's trigger_sync_in_backward).
  void trigger_sync_in_backward();

  // Clips `parameters`' gradients (unscaled first with fp16); returns the
  // total norm, the same on every rank once gradients are synced.
  double clip_grad_norm_(const std::vector<at::Tensor>& parameters, double max_norm,
                         double norm_type = 2.0);
  void clip_grad_value_(const std::vector<at::Tensor>& parameters, double clip_value);
  // DeepSpeed's engine.get_global_grad_norm(): the global gradient norm (as
  // before clipping) that DeepSpeed's gradient_clipping measured at the last
  // optimizer step; nullopt when the engine does not clip.
  std::optional<double> deepspeed_grad_norm() const { return deepspeed_grad_norm_; }

  // Resumes mid-epoch: the loader's next pass starts at batch num_batches.
  template <class Loader>
  Loader& skip_first_batches(Loader& loader, size_t num_batches) {
    // accelerate::DataLoader only.
    static_cast<DataLoaderBase&>(loader).skip_first_batches(num_batches);
    return loader;
  }
  template <class Model>
  Model& unwrap_model(Model& model) {
    return model;
  }  // prepare() wraps nothing

  // ---- Checkpoints (docs/checkpoint-format.md) ------------------------------
  const ProjectConfiguration& project_configuration() const { return project_config_; }
  const std::optional<std::string>& project_dir() const { return project_config_.project_dir(); }
  std::optional<std::string> logging_dir() const { return project_config_.effective_logging_dir(); }
  int64_t save_iteration() const {
    return project_config_.iteration();
  }  // the next checkpoint's number

  // Saves everything training needs to continue exactly (prepared objects,
  // loader positions, random states, registered objects) to `output_dir`,
  // default {project_dir}/checkpoints/checkpoint_{iteration}. Collective and
  // crash-safe; returns the folder written. Tensor-parallel parts are saved
  // whole (resumable at any tp); with ZeRO at tp it is not built yet
  // (refused in one line, nothing written).
  std::string save_state(const std::optional<std::string>& output_dir = std::nullopt);
  // The refusals save_state would give for what was prepared, alone, for
  // callers that save later (the Trainer checks before its first step).
  void check_save_state() const;
  // Restores a save_state folder (default: the newest complete one) into the
  // prepared objects, after prepare(); every file is checked before anything
  // changes, and an Error names the file and tensor. Returns the folder.
  std::string load_state(const std::optional<std::string>& input_dir = std::nullopt);
  // Adds objects with save(OutputArchive&) const and load(InputArchive&) to
  // save_state/load_state (custom_checkpoint_{i}.bin); they must outlive it.
  template <class... Objects>
  void register_for_checkpointing(Objects&... objects);
  // Hooks run on every process at the start of save_state / load_state.
  HookHandle register_save_state_pre_hook(SaveStatePreHook hook);
  HookHandle register_load_state_pre_hook(LoadStatePreHook hook);

  // Copies of `model`'s parameters and buffers by name (module_state_dict
  // order), on every process. Under ZeRO stage 3 the units' weights are
  // gathered for it, and tensor-parallel parts gathered whole (every process
  // must call it). Accelerate's get_state_dict.
  std::vector<std::pair<std::string, at::Tensor>> get_state_dict(const torch::nn::Module& model);
  template <class Impl>
  std::vector<std::pair<std::string, at::Tensor>> get_state_dict(
      const torch::nn::ModuleHolder<Impl>& model);

  // accelerate::save_model on the main process between two barriers; returns
  // the files written (none on other processes). A tensor-parallel model is
  // written whole, as its unsplit model.
  std::vector<std::string> save_model(const torch::nn::Module& model,
                                      const std::string& save_directory,
                                      const SaveModelOptions& options = {});
  template <class Impl>
  std::vector<std::string> save_model(const torch::nn::ModuleHolder<Impl>& model,
                                      const std::string& save_directory,
                                      const SaveModelOptions& options = {});

  // ---- Tracking (docs/tracking.md) -----------------------------------------
  // Starts the log_with trackers for run `project_name`, recording `config`.
  // Every process may call these; only the main process writes.
  void init_trackers(const std::string& project_name, const TrackerConfig& config = {});
  // Whether init_trackers() has run (the Trainer starts its report_to
  // trackers only when the program has not).
  bool trackers_initialized() const;
  // Logs values at `step` (default: the number of earlier log() calls).
  void log(const TrackerValues& values, std::optional<int64_t> step = std::nullopt);
  // Flushes and closes every tracker (also done by the destructor).
  void end_training();
  GeneralTracker& get_tracker(const std::string& name);
  // A logger that knows this job's ranks (main_process_only / in_order) and
  // reads the Accelerator's environment.
  Logger get_logger(const std::string& name, LoggerOptions options = {}) const;

  // ---- Collectives with Accelerate's names (collectives.h, process_control.h)
  at::Tensor gather(const at::Tensor& tensor);
  // gather() that drops the samples even_batches duplicated on a loader's
  // last batch, so the result holds each dataset sample exactly once. With
  // sequence parallelism, from one rank per group (pass values that are the
  // same on every rank of a group, e.g. per-sequence results).
  at::Tensor gather_for_metrics(const at::Tensor& tensor);
  at::Tensor reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum, double scale = 1.0);
  at::Tensor pad_across_processes(const at::Tensor& tensor, int64_t dim = 0, int64_t pad_index = 0,
                                  bool pad_first = false);
  void wait_for_everyone();
  template <class Fn>
  void main_process_first(Fn&& fn) {
    accelerate::main_process_first(*comm_, std::forward<Fn>(fn));
  }
  template <class Fn>
  void local_main_process_first(Fn&& fn) {
    accelerate::local_main_process_first(*comm_, std::forward<Fn>(fn));
  }
  template <class... Args>
  void print(const Args&... args) const {
    accelerate::print(*job_, args...);
  }
  void set_trigger();
  bool check_trigger();

  // One per prepared model (multi-process jobs), for statistics and tests.
  std::vector<GradientReducer*> reducers() const;

 private:
  // One argument of prepare(); another type is a one-line compile error.
  template <class T>
  void prepare_one(T& object);
  void prepare_module(torch::nn::Module& module);
  void prepare_optimizer(PreparedOptimizerBase& optimizer);
  void prepare_plain_optimizer(torch::optim::Optimizer& optimizer);
  void prepare_scheduler(PreparedSchedulerBase& scheduler);
  void prepare_loader(DataLoaderBase& loader);
  void finish_prepare();
  EngineChoice configure_from(const Environment& env);  // the engine is built once connected
  void configure_mixed_precision();
  // The job's device mesh, its engine over it, and the Accelerator's own
  // groups (collective).
  void form_mesh(const EngineChoice& engine);
  void set_models_sync(bool sync);
  void begin_micro_step();
  void end_micro_step();
  Environment environment() const;  // options' environment, else the process's

  AcceleratorOptions options_;
  std::shared_ptr<const JobState> job_;
  std::shared_ptr<Communicator> comm_;
  // Every process group comes from the mesh (src/distributed/device_mesh.h).
  std::shared_ptr<distributed::DeviceMesh> mesh_;
  SequenceParallel sequence_parallel_;
  TensorParallel tensor_parallel_;
  std::unique_ptr<TensorParallelParts> tensor_parallel_parts_;  // of the prepared models
  // The processes that read different batches (the job's communicator, but
  // with sequence parallelism the ranks at this rank's place in every
  // sequence-parallel group): data loaders shard over them, and
  // gather_for_metrics gathers over them.
  std::shared_ptr<Communicator> batch_comm_;
  std::shared_ptr<GradientState> gradient_state_ = std::make_shared<GradientState>();
  MixedPrecision mixed_precision_ = MixedPrecision::kNo;
  std::optional<AutocastGuard> ambient_autocast_;  // around the constructing thread's loop
  std::shared_ptr<GradScaler> scaler_;
  // Prepared objects in prepare() order (checkpoints save them in this order).
  std::vector<torch::nn::Module*> prepared_modules_;
  std::vector<torch::optim::Optimizer*> prepared_optimizers_;
  std::vector<PreparedSchedulerBase*> prepared_schedulers_;
  // DummySchedulers of the prepare() call under way, built at its end
  // (their DummyOptim may come after them in the call).
  std::vector<PreparedSchedulerBase*> unbuilt_schedules_;
  std::vector<DataLoaderBase*> loaders_;
  std::unique_ptr<ParallelEngine> engine_;  // src/parallel/parallel_engine.h
  // Checkpoints (accelerator_checkpoint.cpp).
  friend class AcceleratorCheckpointing;
  static ProjectConfiguration resolve_project_config(const AcceleratorOptions& options);
  void restore_state_from(const std::string& folder);
  // options_ is declared (so initialised) before this.
  ProjectConfiguration project_config_ = resolve_project_config(options_);
  std::vector<CheckpointObject> custom_objects_;
  StatePreHooks state_pre_hooks_;
  std::unique_ptr<Trackers> trackers_;
  Trigger trigger_;
  int64_t step_ = 0;
  bool force_sync_ = false;
  std::optional<double> deepspeed_grad_norm_;
  bool in_no_sync_ = false;
};

}  // namespace accelerate

#include "accelerate/detail/accelerator-inl.h"  // the templates' definitions
