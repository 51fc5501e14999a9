#include "accelerate/accelerator.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include <ATen/Parallel.h>
#include <torch/nn/utils/clip_grad.h>

#include "accelerate/errors.h"
#include "accelerate/malloc_tuning.h"
#include "common/settings.h"
#include "accelerator/accelerator_zero.h"

namespace accelerate {
namespace {

// Operations inside an EmptyWeightsGuard give meta tensors (factories and
// initialisers keep CPU tensors): one registered in a module cannot receive
// the main process's values.
std::string meta_tensor_problem(const torch::nn::Module& module) {
  const auto problem = [](const std::string& kind, const std::string& name) {
    return kind + " '" + name +
           "' is a meta tensor: it was computed inside zero3_init(), where operations give no "
           "values; create it with a factory (torch::zeros, torch::empty) or an initialiser, or "
           "register it after the guard";
  };
  for (const auto& item : module.named_parameters(true)) {
    if (item.value().is_meta()) return problem("parameter", item.key());
  }
  for (const auto& item : module.named_buffers(true)) {
    if (item.value().is_meta()) return problem("buffer", item.key());
  }
  return "";
}

int accumulation_steps_from(const AcceleratorOptions& options, const Environment& env) {
  if (options.gradient_accumulation_steps()) return *options.gradient_accumulation_steps();
  return settings::kGradientAccumulationSteps.read(env).value_or(
      options.gradient_accumulation_plugin().num_steps());
}

MixedPrecision mixed_precision_from(const AcceleratorOptions& options, const Environment& env) {
  return options.mixed_precision() ? *options.mixed_precision() : settings::kMixedPrecision.read_or_default(env);
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
    if (auto set_openblas_threads = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
      set_openblas_threads(settings::kOpenblasNumThreads.fallback);
    }
  }
}

// ZeRO shards an optimizer when it is prepared, over the models prepared
// by then: a model prepared later would keep its parameters whole in it,
// while its reducer released their gradients after each backward.
void refuse_optimizers_holding(const std::vector<torch::optim::Optimizer*>& optimizers,
                               torch::nn::Module& module) {
  const std::vector<at::Tensor> parameters = module.parameters(true);
  for (const torch::optim::Optimizer* optimizer : optimizers) {
    if (!sharding::shares_parameters(*optimizer, parameters)) continue;
    throw ConfigError(
        "ZeRO shards an optimizer over its model's gradient buckets: prepare the model "
        "before its optimizer (e.g. accelerator.prepare(model, optimizer, loader))");
  }
}

}  // namespace

Accelerator::Accelerator(AcceleratorOptions options) : options_(std::move(options)) {
  const Environment env = environment();
  JobOptions job_options = options_.job_options();
  if (options_.cpu()) job_options.cpu(*options_.cpu());
  job_ = std::make_shared<const JobState>(current_job_state(job_options, env));
  configure_from(env);
  set_thread_count(*job_, env);
  if (options_.tune_malloc()) tune_malloc_for_training(env);
  comm_ = Communicator::connect(*job_);
}

Accelerator::Accelerator(std::shared_ptr<Communicator> communicator, AcceleratorOptions options)
    : options_(std::move(options)), comm_(std::move(communicator)) {
  job_ = std::make_shared<const JobState>(comm_->job());
  configure_from(environment());
}

Environment Accelerator::environment() const {
  return options_.environment() ? *options_.environment() : current_environment();
}

void Accelerator::configure_from(const Environment& env) {
  mixed_precision_ = mixed_precision_from(options_, env);
  zero_ = Zero::configure(options_, env, *job_, mixed_precision_);
  if (zero_ && zero_->file_precision) mixed_precision_ = *zero_->file_precision;
  configure_mixed_precision();
  int accumulation = accumulation_steps_from(options_, env);
  if (zero_ && zero_->plugin.gradient_accumulation_steps() &&
      *zero_->plugin.gradient_accumulation_steps() != accumulation) {
    // Accelerate's rule: the DeepSpeed setting wins over the Accelerator's.
    if (job_->is_main_process() && options_.gradient_accumulation_steps()) {
      std::cerr << "accelerate: note: gradient_accumulation_steps is "
                << *options_.gradient_accumulation_steps() << " in AcceleratorOptions but "
                << *zero_->plugin.gradient_accumulation_steps()
                << " in the DeepSpeed settings; using DeepSpeed's\n";
    }
    accumulation = *zero_->plugin.gradient_accumulation_steps();
  }
  gradient_state_->set_num_steps(accumulation);
  gradient_state_->set_adjust_scheduler(options_.gradient_accumulation_plugin().adjust_scheduler() &&
                                        options_.step_scheduler_with_optimizer());
  trackers_ = std::make_unique<Trackers>(
      TrackingOptions()
          .log_with(options_.log_with())
          .trackers(options_.trackers())
          .logging_dir(project_config_.effective_logging_dir().value_or(""))
          .is_main_process(job_->is_main_process()));
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
    ambient_autocast_.emplace(cuda ? c10::kCUDA : c10::kCPU, mixed_precision_dtype(mixed_precision_),
                              options_.autocast_kwargs());
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

std::string Accelerator::distributed_type() const {
  if (zero_) return zero_->distributed_type;
  if (!job_->is_distributed()) return "NO";
  return job_->device.is_cuda() ? "MULTI_GPU" : "MULTI_CPU";
}

// ---- prepare -----------------------------------------------------------------

void Accelerator::prepare_module(torch::nn::Module& module) {
  if (std::find(prepared_modules_.begin(), prepared_modules_.end(), &module) !=
      prepared_modules_.end()) {
    return;
  }
  bool built_empty = false;  // somewhere: every unit starts free (zero3_init)
  if (zero_ && zero_->weights_from_main_process && job_->is_distributed()) {
    built_empty = agree_on_empty_build(module);
  }
  if (options_.device_placement()) module.to(device());
  if (job_->is_distributed()) {
    // Every rank starts from rank 0's weights, then gradients stay in sync.
    // At stage 3 the trained parameters travel bucket by bucket straight
    // into the shards (ModelShards), so that a process that built its model
    // empty (zero3_init) never holds them whole; the rest travels here.
    const bool stage3 = zero_ && zero_->stage() == 3;
    if (!stage3) broadcast_module_state(*comm_, module, /*include_buffers=*/true);
    if (zero_ && zero_->stage() > 0) refuse_optimizers_holding(prepared_optimizers_, module);
    reducers_.push_back(GradientReducer::for_module(comm_, module, options_.ddp_options()));
    if (stage3) sharding::broadcast_unbucketed_state(*comm_, module, *reducers_.back());
    if (zero_ && zero_->stage() > 0) {
      zero_->shard_model(comm_, module, *reducers_.back(), /*units_start_free=*/built_empty);
    }
  }
  prepared_modules_.push_back(&module);
}

bool Accelerator::agree_on_empty_build(const torch::nn::Module& module) {
  // Every process learns whether any built the model inside zero3_init()
  // (the processes free the units alike, or their gathers would not match)
  // and whether any holds a tensor computed there, which has no values to
  // receive: then every process stops with the same error.
  const std::string mine = (zero_->zero3_init_called ? "1" : "0") + meta_tensor_problem(module);
  const std::vector<std::string> all = comm_->all_gather_bytes(mine);
  bool called = false;
  for (std::size_t rank = 0; rank < all.size(); ++rank) {
    called |= all[rank].front() == '1';
    if (all[rank].size() > 1) {
      throw Error("prepare failed on rank " + std::to_string(rank) + ": " + all[rank].substr(1));
    }
  }
  return called;
}

EmptyWeightsGuard Accelerator::zero3_init() {
  const bool empty = zero_ && zero_->weights_from_main_process && job_->is_distributed();
  if (empty) zero_->zero3_init_called = true;
  return EmptyWeightsGuard(empty && !is_main_process());
}

void Accelerator::prepare_optimizer(PreparedOptimizerBase& optimizer) {
  if (optimizer.is_prepared()) return;
  if (auto* dummy = dynamic_cast<DummyOptim*>(&optimizer)) {
    if (!zero_) {
      throw ConfigError(
          "DummyOptim stands in for the optimizer of a DeepSpeed config file, and this job has "
          "no DeepSpeed settings; declare accelerate::Optimizer<YourOptimizer> instead");
    }
    zero_->build_optimizer(*dummy);
  }
  if (zero_ && zero_->stage() > 0 && job_->is_distributed()) shard_optimizer(optimizer);
  optimizer.attach(gradient_state_);
  optimizer.attach_scaler(scaler_);
  prepared_optimizers_.push_back(&optimizer.base_optimizer());
}

void Accelerator::shard_optimizer(PreparedOptimizerBase& optimizer) {
  // The models holding any of its parameters (the same on every process).
  std::vector<std::shared_ptr<sharding::ModelShards>> models;
  for (const auto& model : zero_->models) {
    if (sharding::shares_parameters(optimizer.base_optimizer(), model->reducer().parameters())) {
      models.push_back(model);
    }
  }
  if (models.empty()) {
    throw ConfigError(
        "ZeRO shards an optimizer over its model's gradient buckets: prepare the model before "
        "its optimizer (e.g. accelerator.prepare(model, optimizer, loader))");
  }
  auto sharded = std::make_shared<sharding::ShardedOptimizer>(comm_, optimizer.base_optimizer(),
                                                              std::move(models));
  optimizer.attach_shard_hooks(sharded);
  zero_->optimizers.push_back(sharded);
  // Each process checks only its shard for inf/NaN: a step skipped anywhere
  // is skipped everywhere.
  if (scaler_) {
    scaler_->combine_found_inf_with(
        [comm = comm_](at::Tensor& found_inf) { comm->all_reduce(found_inf, ReduceOp::kMax); });
  }
}

void Accelerator::prepare_plain_optimizer(torch::optim::Optimizer& optimizer) {
  if (zero_ && zero_->stage() > 0 && job_->is_distributed()) {
    throw ConfigError(
        "ZeRO steps each process's shard of the parameters: declare the optimizer as "
        "accelerate::Optimizer<YourOptimizer> so that prepare() can shard it");
  }
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
    if (!zero_) {
      throw ConfigError(
          "DummyScheduler stands in for the scheduler of a DeepSpeed config file, and this job "
          "has no DeepSpeed settings; declare accelerate::Scheduler<YourScheduler> instead");
    }
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
  loader.configure_sharding(comm_, options_.dataloader_config());
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
  std::vector<PreparedSchedulerBase*> unbuilt;
  unbuilt.swap(unbuilt_schedules_);
  for (PreparedSchedulerBase* scheduler : unbuilt) {
    zero_->build_schedule(static_cast<DummyScheduler&>(*scheduler), num_processes(),
                          options_.dataloader_config().split_batches());
    scheduler->attach(gradient_state_);
    prepared_schedulers_.push_back(scheduler);
  }
  if (!zero_ || !zero_->file || zero_->resolved || prepared_optimizers_.empty()) return;
  sharding::ProgramValues program;
  program.world_size = num_processes();
  // Accelerate's is_train_batch_min: the smallest loader's batch.
  for (const DataLoaderBase* loader : loaders_) {
    const auto size = static_cast<int64_t>(loader->sharding().process_batch_size());
    program.micro_batch_size = std::min(program.micro_batch_size.value_or(size), size);
  }
  program.gradient_accumulation_steps = gradient_accumulation_steps();
  program.gradient_clipping = zero_->clipping();
  program.mixed_precision = mixed_precision_;
  zero_->resolve_file(program, job_->is_main_process());
}

// ---- The step ------------------------------------------------------------------

void Accelerator::set_models_sync(bool sync) {
  for (auto& reducer : reducers_) reducer->set_sync_enabled(sync);
}

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
  at::Tensor scaled = gradient_accumulation_steps() > 1 ? loss / gradient_accumulation_steps() : loss;
  if (scaler_) scaled = scaler_->scale(scaled);
  if (options_.ddp_options().find_unused_parameters()) {
    for (auto& reducer : reducers_) reducer->prepare_for_backward({scaled});
  }
  {
    // Gradients are computed in the forward's dtypes, never re-cast.
    AutocastGuard no_autocast = autocast(AutocastOptions().enabled(false));
    scaled.backward();
  }
  // The optimizer is about to change the weights: drop their casted copies.
  if (ambient_autocast_) clear_autocast_cache();
  for (auto& reducer : reducers_) {
    const bool synced = reducer->sync_enabled();
    reducer->finalize_backward();
    // DDP broadcasts buffers before each forward; after a synced backward is
    // the same point in the loop (before the next forward).
    if (synced) reducer->broadcast_buffers();
  }
  if (zero_) {
    for (auto& units : zero_->units) units->after_backward();
    // Offloading: the optimizer steps in host memory.
    for (auto& model : zero_->models) {
      if (model->reducer().sync_enabled()) model->gradients_to_host();
    }
  }
  // DeepSpeed's gradient_clipping: every optimizer step clips, as its engine does.
  if (zero_ && zero_->clipping() && sync_gradients()) {
    std::vector<at::Tensor> parameters;
    for (auto* module : prepared_modules_) {
      for (const auto& p : module->parameters()) parameters.push_back(p);
    }
    clip_grad_norm_(parameters, *zero_->clipping());
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
  if (zero_) {
    for (auto& sharded : zero_->optimizers) sharded->bind_gradients();  // the shards' gradients
  }
  for (torch::optim::Optimizer* optimizer : prepared_optimizers_) {
    if (!scaler_->is_unscaled(*optimizer)) scaler_->unscale_(*optimizer);
  }
}

double Accelerator::clip_grad_norm_(const std::vector<at::Tensor>& parameters, double max_norm,
                                    double norm_type) {
  unscale_gradients();
  // ZeRO: each process holds the unscaled, averaged gradients of its shard
  // only; the norm is combined from every process's shards.
  const auto sharded =
      zero_ ? zero_->covering(parameters) : std::vector<sharding::ShardedOptimizer*>();
  if (!sharded.empty()) return sharding::clip_grad_norm(*comm_, sharded, max_norm, norm_type);
  return torch::nn::utils::clip_grad_norm_(parameters, max_norm, norm_type);
}

void Accelerator::clip_grad_value_(const std::vector<at::Tensor>& parameters, double clip_value) {
  unscale_gradients();
  const auto sharded =
      zero_ ? zero_->covering(parameters) : std::vector<sharding::ShardedOptimizer*>();
  if (!sharded.empty()) return sharding::clip_grad_value(sharded, clip_value);
  torch::nn::utils::clip_grad_value_(parameters, clip_value);
}

}  // namespace accelerate
