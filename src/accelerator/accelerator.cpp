#include "accelerate/accelerator/accelerator.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <thread>

#include <ATen/Parallel.h>
#include <torch/nn/module.h>

#include "accelerate/common/cpu_capability.h"
#include "accelerate/common/errors.h"
#include "accelerate/common/malloc_tuning.h"
#include "accelerate/sharding/dummy_optim.h"
#include "accelerate/sharding/dummy_scheduler.h"
#include "accelerator/engine_choice.h"
#include "accelerator/tensor_parallel_split.h"
#include "accelerator/uncaught_errors.h"
#include "common/bf16_hardware.h"
#include "common/cpu_info.h"
#include "common/openblas_core.h"
#include "common/settings.h"
#include "parallel/parallel_engine.h"

namespace accelerate {
namespace {

int accumulation_steps_from(const AcceleratorOptions& options, const Environment& env) {
  if (options.gradient_accumulation_steps()) return *options.gradient_accumulation_steps();
  return settings::kGradientAccumulationSteps.read(env).value_or(
      options.gradient_accumulation_plugin().num_steps());
}

MixedPrecision mixed_precision_from(const AcceleratorOptions& options, const Environment& env) {
  return options.mixed_precision() ? *options.mixed_precision()
                                   : settings::kMixedPrecision.read_or_default(env);
}

// Threads (docs/launching.md, "Threads"). Intra-op threads: the launcher's
// OMP_NUM_THREADS share, else the cores divided among this machine's
// processes (Debian's LibTorch 1.13 would use one thread, 2.6 all cores).
// OpenBLAS: 1 thread unless OPENBLAS_NUM_THREADS says otherwise. Debian links
// LibTorch to the pthread build of OpenBLAS, whose pool sits beside OpenMP's
// and busy-waits after every call: with both at full size, training ran
// slower than on one thread (docs/performance.md, "Threads on LibTorch 1.13
// and 2.6"). OpenBLAS read its variables when it loaded, so this uses its
// run-time call, when the BLAS in this process is OpenBLAS.
void set_thread_count(const JobState& job, const Environment& env) {
  // OpenMP also allows lists ("4,2" for nested pools): those keep the default.
  const auto text = lookup(env, settings::kOmpNumThreads.variable());
  int threads = text ? settings::kOmpNumThreads.try_parse(*text).value_or(0) : 0;
  if (threads < 1) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / std::max(1, job.local_world_size));
  }
  at::set_num_threads(threads);
  if (!lookup(env, settings::kOpenblasNumThreads.variable())) {
    using SetThreads = void (*)(int);
    if (auto set_openblas_threads =
            reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
      set_openblas_threads(settings::kOpenblasNumThreads.fallback);
    }
  }
}

// A program started without the launcher, on a CPU its OpenBLAS does not
// know: OpenBLAS chose its kernels when it loaded, so all that can be done
// here is to say what to export (common/openblas_core.h), from the main
// process only.
void note_generic_openblas_kernels(const JobState& job, const Environment& env) {
  if (!job.is_main_process()) return;
  const auto picked = detail::openblas_core_in_this_process();
  if (!picked) return;
  const auto note =
      detail::openblas_core_note(picked, detail::parse_cpuinfo(detail::read_cpuinfo()).flags, env);
  if (note) std::cerr << "accelerate: note: " << *note << "\n";
}

// bf16 autocast on a CPU without bf16 instructions trains several times
// slower than fp32, with nothing else to say why: the main process says it,
// once.
void note_bf16_emulation(const JobState& job, MixedPrecision precision, bool autocast) {
  if (!job.is_main_process() || job.device.is_cuda() || precision != MixedPrecision::kBF16 ||
      !autocast) {
    return;
  }
  const auto note =
      detail::bf16_emulation_note(detail::parse_cpuinfo(detail::read_cpuinfo()).flags);
  if (note) std::cerr << "accelerate: note: mixed_precision 'bf16': " << *note << "\n";
}

}  // namespace

Accelerator::Accelerator(AcceleratorOptions options) : options_(std::move(options)) {
  report_uncaught_errors_in_one_line();
  const Environment env = environment();
  JobOptions job_options = options_.job_options();
  if (options_.cpu()) job_options.cpu(*options_.cpu());
  job_ = std::make_shared<const JobState>(current_job_state(job_options, env));
  EngineChoice engine = configure_from(env);
  set_thread_count(*job_, env);
  note_generic_openblas_kernels(*job_, env);
  note_bf16_emulation(*job_, mixed_precision_, options_.autocast_kwargs().enabled());
  // The kernels' instruction set is fixed now, and a bad
  // ACCELERATE_CPU_CAPABILITY stops the program here rather than at the
  // first kernel call.
  kernel_capability();
  if (options_.tune_malloc()) tune_malloc_for_training(env);
  comm_ = Communicator::connect(*job_);
  form_mesh(engine);
}

Accelerator::Accelerator(std::shared_ptr<Communicator> communicator, AcceleratorOptions options)
    : options_(std::move(options)), comm_(std::move(communicator)) {
  report_uncaught_errors_in_one_line();
  job_ = std::make_shared<const JobState>(comm_->job());
  EngineChoice engine = configure_from(environment());
  form_mesh(engine);
}

void Accelerator::form_mesh(const EngineChoice& engine) {
  mesh_ = std::make_shared<distributed::DeviceMesh>(comm_, engine.mesh_shape);
  engine_ = engine.build(*mesh_, scaler_);
  // After the engine's groups, in the same order on every process (forming
  // a group is collective).
  if (mesh_->shape().sp > 1)
    sequence_parallel_ = SequenceParallel(mesh_->group({distributed::MeshDim::kSp}));
  if (mesh_->shape().tp > 1)
    tensor_parallel_ =
        TensorParallel(mesh_->group({distributed::MeshDim::kTp}), engine.tp_sequence_parallel);
  tensor_parallel_parts_ = std::make_unique<TensorParallelParts>();
  batch_comm_ = mesh_->group(distributed::kBatchDims);
}

Environment Accelerator::environment() const {
  return options_.environment() ? *options_.environment() : current_environment();
}

EngineChoice Accelerator::configure_from(const Environment& env) {
  EngineChoice engine = choose_engine(options_, env, *job_, mixed_precision_from(options_, env));
  mixed_precision_ = engine.mixed_precision;
  configure_mixed_precision();
  int accumulation = accumulation_steps_from(options_, env);
  if (engine.gradient_accumulation_steps && *engine.gradient_accumulation_steps != accumulation) {
    // Accelerate's rule: the DeepSpeed setting wins over the Accelerator's.
    if (job_->is_main_process() && options_.gradient_accumulation_steps()) {
      std::cerr << "accelerate: note: gradient_accumulation_steps is "
                << *options_.gradient_accumulation_steps() << " in AcceleratorOptions but "
                << *engine.gradient_accumulation_steps
                << " in the DeepSpeed settings; using DeepSpeed's\n";
    }
    accumulation = *engine.gradient_accumulation_steps;
  }
  gradient_state_->set_num_steps(accumulation);
  gradient_state_->set_adjust_scheduler(
      options_.gradient_accumulation_plugin().adjust_scheduler() &&
      options_.step_scheduler_with_optimizer());
  trackers_ = std::make_unique<Trackers>(
      TrackingOptions()
          .log_with(options_.log_with())
          .trackers(options_.trackers())
          .logging_dir(project_config_.effective_logging_dir().value_or(""))
          .is_main_process(job_->is_main_process()));
  return engine;
}

void Accelerator::configure_mixed_precision() {
  if (mixed_precision_ == MixedPrecision::kNo) return;
  const bool cuda = job_->device.is_cuda();
  if (mixed_precision_ == MixedPrecision::kFP16 && !cuda && options_.autocast_kwargs().enabled()) {
    throw ConfigError(
        "mixed_precision 'fp16' needs a CUDA device: fp16 autocast is not available on the "
        "CPU; use 'bf16' there");
  }
  if (mixed_precision_ == MixedPrecision::kFP16) {
    scaler_ = std::make_shared<GradScaler>(options_.grad_scaler_kwargs());
  }
  if (options_.autocast_kwargs().enabled()) {
    // Python's Accelerate wraps each forward in its own autocast region, so
    // a cast copy lives one forward. This region spans the whole loop: a
    // cache here would keep the copies an evaluation made under no-grad
    // (with no autograd history) for the next training forward, whose
    // parameters then get no gradient. Each forward casts afresh instead;
    // an autocast() scope around a forward caches within it.
    ambient_autocast_.emplace(cuda ? c10::kCUDA : c10::kCPU,
                              mixed_precision_dtype(mixed_precision_),
                              AutocastOptions(options_.autocast_kwargs()).cache_enabled(false));
  }
}

AutocastGuard Accelerator::autocast(const AutocastOptions& options) const {
  if (mixed_precision_ == MixedPrecision::kNo) return AutocastGuard();
  return AutocastGuard(job_->device.is_cuda() ? c10::kCUDA : c10::kCPU,
                       mixed_precision_dtype(mixed_precision_), options);
}

Accelerator::~Accelerator() = default;

torch::Device Accelerator::device() const {
  if (job_->device.is_cuda()) return torch::Device(torch::kCUDA, job_->device.index);
  return torch::Device(torch::kCPU);
}

DistributedType Accelerator::distributed_type() const { return engine_->distributed_type(); }

std::vector<GradientReducer*> Accelerator::reducers() const { return engine_->reducers(); }

// ---- prepare -----------------------------------------------------------------

void Accelerator::prepare_module(torch::nn::Module& module) {
  if (std::find(prepared_modules_.begin(), prepared_modules_.end(), &module) !=
      prepared_modules_.end()) {
    return;
  }
  // Split before the engine flattens or shards the parameters.
  tensor_parallel_parts_->split(module, tensor_parallel_);
  engine_->prepare_model(
      module, options_.device_placement() ? std::optional<c10::Device>(device()) : std::nullopt);
  prepared_modules_.push_back(&module);
}

EmptyWeightsGuard Accelerator::zero3_init() { return engine_->zero3_init(); }

void Accelerator::prepare_optimizer(PreparedOptimizerBase& optimizer) {
  if (optimizer.is_prepared()) return;
  if (auto* dummy = dynamic_cast<DummyOptim*>(&optimizer)) engine_->build_optimizer(*dummy);
  engine_->prepare_optimizer(optimizer);
  optimizer.attach(gradient_state_);
  optimizer.attach_scaler(scaler_);
  prepared_optimizers_.push_back(&optimizer.base_optimizer());
}

void Accelerator::prepare_plain_optimizer(torch::optim::Optimizer& optimizer) {
  engine_->check_plain_optimizer();
  if (scaler_) {
    throw ConfigError(
        "mixed_precision 'fp16' scales the loss: declare the optimizer as "
        "accelerate::Optimizer<YourOptimizer> so that its steps unscale gradients and skip "
        "inf/NaN steps");
  }
  // A plain optimizer cannot skip its steps on accumulation micro-batches.
  if (gradient_accumulation_steps() > 1) {
    throw ConfigError(
        "gradient_accumulation_steps is " + std::to_string(gradient_accumulation_steps()) +
        ": declare the optimizer as accelerate::Optimizer<YourOptimizer> so that it skips "
        "steps while gradients accumulate");
  }
  if (std::find(prepared_optimizers_.begin(), prepared_optimizers_.end(), &optimizer) ==
      prepared_optimizers_.end()) {
    prepared_optimizers_.push_back(&optimizer);
  }
}

void Accelerator::prepare_scheduler(PreparedSchedulerBase& scheduler) {
  if (scheduler.is_prepared()) return;
  if (dynamic_cast<DummyScheduler*>(&scheduler) != nullptr) {
    // Built, then prepared, when the call ends (its DummyOptim may come later).
    if (std::find(unbuilt_schedules_.begin(), unbuilt_schedules_.end(), &scheduler) ==
        unbuilt_schedules_.end()) {
      unbuilt_schedules_.push_back(&scheduler);
    }
    return;
  }
  scheduler.attach(gradient_state_);
  prepared_schedulers_.push_back(&scheduler);
}

void Accelerator::prepare_loader(DataLoaderBase& loader) {
  if (std::find(loaders_.begin(), loaders_.end(), &loader) != loaders_.end()) return;
  if (batch_comm_ != comm_) {
    // The ranks of a sequence-parallel group read the same batches, so the
    // loader shards over the data-parallel ranks only, with one seed.
    if (loader.options().shuffle()) {
      loader.set_shuffle_seed(broadcast_object(*comm_, loader.shuffle_seed(), 0));
    }
  }
  loader.configure_sharding(batch_comm_, options_.dataloader_config());
  if (options_.device_placement()) loader.set_device(device());
  // The observer holds the state, not the Accelerator: either may go first.
  loader.add_iteration_observer([state = gradient_state_](DataLoaderBase& l, IterationEvent event) {
    if (event == IterationEvent::kBegin) {
      state->loader_began(&l);
    } else {
      state->loader_ended(&l);
    }
  });
  loaders_.push_back(&loader);
}

void Accelerator::finish_prepare() {
  PreparedProgram program;
  program.world_size = num_processes();
  program.split_batches = options_.dataloader_config().split_batches();
  std::vector<PreparedSchedulerBase*> unbuilt;
  unbuilt.swap(unbuilt_schedules_);
  for (PreparedSchedulerBase* scheduler : unbuilt) {
    engine_->build_schedule(static_cast<DummyScheduler&>(*scheduler), program);
    scheduler->attach(gradient_state_);
    prepared_schedulers_.push_back(scheduler);
  }
  // Accelerate's is_train_batch_min: the smallest loader's batch.
  for (const DataLoaderBase* loader : loaders_) {
    const auto size = static_cast<int64_t>(loader->sharding().process_batch_size());
    program.micro_batch_size = std::min(program.micro_batch_size.value_or(size), size);
  }
  program.gradient_accumulation_steps = gradient_accumulation_steps();
  program.mixed_precision = mixed_precision_;
  program.has_optimizer = !prepared_optimizers_.empty();
  engine_->finish_prepare(program);
}

// ---- The step ------------------------------------------------------------------

void Accelerator::set_models_sync(bool sync) { engine_->set_sync(sync); }

void Accelerator::begin_micro_step() {
  const auto& plugin = options_.gradient_accumulation_plugin();
  if (plugin.sync_with_dataloader() && gradient_state_->end_of_dataloader()) {
    // The loader's last batch completes the accumulation, whatever the count.
    step_ = 0;
    gradient_state_->set_sync_gradients(true);
  } else {
    ++step_;
    gradient_state_->set_sync_gradients(step_ % gradient_accumulation_steps() == 0);
  }
  set_models_sync(gradient_state_->sync_gradients() || plugin.sync_each_batch());
}

void Accelerator::end_micro_step() { set_models_sync(!in_no_sync_); }

Accelerator::AccumulateScope Accelerator::accumulate() {
  begin_micro_step();
  return AccumulateScope([this] { end_micro_step(); });
}

Accelerator::NoSyncScope Accelerator::no_sync() {
  in_no_sync_ = true;
  set_models_sync(false);
  return NoSyncScope([this] {
    in_no_sync_ = false;
    set_models_sync(true);
  });
}

void Accelerator::trigger_sync_in_backward() { force_sync_ = true; }

void Accelerator::backward(const at::Tensor& loss) {
  if (force_sync_) set_models_sync(true);
  at::Tensor scaled =
      gradient_accumulation_steps() > 1 ? loss / gradient_accumulation_steps() : loss;
  if (scaler_) scaled = scaler_->scale(scaled);
  engine_->before_backward(scaled);
  {
    // Gradients are computed in the forward's dtypes, never re-cast.
    AutocastGuard no_autocast = autocast(AutocastOptions().enabled(false));
    scaled.backward();
  }
  // The optimizer is about to change the weights: drop their casted copies.
  if (ambient_autocast_) clear_autocast_cache();
  engine_->after_backward();
  // DeepSpeed's gradient_clipping: every optimizer step clips, as its engine does.
  if (const auto clipping = engine_->gradient_clipping(); clipping && sync_gradients()) {
    std::vector<at::Tensor> parameters;
    for (auto* module : prepared_modules_) {
      for (const auto& p : module->parameters()) parameters.push_back(p);
    }
    deepspeed_grad_norm_ = clip_grad_norm_(parameters, *clipping);
  }
  if (force_sync_) {
    force_sync_ = false;
    set_models_sync(!in_no_sync_ && gradient_state_->sync_gradients());
  }
}

void Accelerator::unscale_gradients() {
  // Mid-accumulation the gradients are partial sums still to be added to:
  // unscaling them now would mix scaled and unscaled values.
  if (!scaler_ || !sync_gradients()) return;
  engine_->before_unscale();
  for (torch::optim::Optimizer* optimizer : prepared_optimizers_) {
    if (!scaler_->is_unscaled(*optimizer)) scaler_->unscale_(*optimizer);
  }
}

double Accelerator::clip_grad_norm_(const std::vector<at::Tensor>& parameters, double max_norm,
                                    double norm_type) {
  unscale_gradients();
  if (tensor_parallel_.enabled()) {
    return clip_grad_norm_over_tensor_parallel(*engine_, parameters, max_norm, norm_type,
                                               tensor_parallel_, *tensor_parallel_parts_);
  }
  return engine_->clip_grad_norm(parameters, max_norm, norm_type);
}

void Accelerator::clip_grad_value_(const std::vector<at::Tensor>& parameters, double clip_value) {
  unscale_gradients();
  engine_->clip_grad_value(parameters, clip_value);
}

}  // namespace accelerate
