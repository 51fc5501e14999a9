// Accelerator::Zero::configure: which ZeRO setting a job runs with.
#include "accelerator/accelerator_zero.h"

#include <iostream>
#include <string>

#include <torch/nn/module.h>

#include "accelerate/errors.h"
#include "common/settings.h"
#include "sharding/deepspeed_config.h"
#include "sharding/deepspeed_objects.h"
#include "sharding/plugin_from_environment.h"

namespace accelerate {
namespace {

// What of CPU offloading a job runs (prints its notes on the main process).
// Offloading moves shards between the device and host memory; on a CPU-only
// job both are the same memory, so it runs there only when asked to
// (ACCELERATE_OFFLOAD_ON_CPU_JOB: the offload path without a GPU).
sharding::Offload offload_for(const DeepSpeedPlugin& plugin,
                              const std::optional<FullyShardedDataParallelPlugin>& fsdp,
                              const JobState& job, const Environment& env) {
  const int stage = plugin.zero_stage();
  const bool fsdp_offload = fsdp && fsdp->cpu_offload();
  const bool offload_parameters =
      stage == 3 && (plugin.offload_param_device() == OffloadDevice::kCpu || fsdp_offload);
  const bool offload_optimizer =
      plugin.offload_optimizer_device() == OffloadDevice::kCpu || fsdp_offload;
  const bool copies = job.device.is_cuda() || settings::kOffloadOnCpuJob.read_or_default(env);
  sharding::Offload offload;
  if (copies && job.is_distributed() && stage > 0) {
    offload.parameters = offload_parameters;
    offload.optimizer = offload_optimizer;
  }
  if (!job.is_main_process()) return offload;
  if (plugin.offload_param_device() == OffloadDevice::kCpu && stage < 3) {
    std::cerr << "accelerate: note: offload_param_device applies to ZeRO stage 3; ignored at stage "
              << stage << "\n";
  }
  // What was asked for, in the words it was asked with.
  std::string requested;
  const auto ask = [&](bool asked, const char* words) {
    if (asked) requested += (requested.empty() ? "" : " and ") + std::string(words);
  };
  ask(fsdp_offload, "FSDP cpu_offload");
  ask(!fsdp_offload && plugin.offload_optimizer_device() == OffloadDevice::kCpu,
      "offload_optimizer_device cpu");
  ask(!fsdp_offload && offload_parameters, "offload_param_device cpu");
  if (requested.empty()) return offload;
  if (!copies) {
    std::cerr << "accelerate: note: " << requested
              << " changes nothing in a CPU-only job: the parameters and the optimizer state "
                 "are in CPU memory already\n";
  } else if (!job.is_distributed() || stage == 0) {
    std::cerr << "accelerate: note: " << requested << " needs ZeRO's shards, which "
              << (stage == 0 ? "stage 0 (data parallelism) does not make"
                             : "a job of one process does not make (it trains as data "
                               "parallelism)")
              << ": nothing is offloaded\n";
  } else {
    if (!job.device.is_cuda()) {
      std::cerr << "accelerate: note: " << requested << " with "
                << settings::kOffloadOnCpuJob.variable()
                << ": this CPU-only job copies its shards to host memory and back as a GPU job "
                   "does\n";
    }
    if (fsdp_offload && stage < 3) {
      std::cerr << "accelerate: note: FSDP cpu_offload with "
                << to_string(fsdp->sharding_strategy())
                << " offloads the optimizer step; the parameters stay whole on the device\n";
    }
  }
  return offload;
}

}  // namespace

std::unique_ptr<Accelerator::Zero> Accelerator::Zero::configure(const AcceleratorOptions& options,
                                                                const Environment& env,
                                                                const JobState& job,
                                                                MixedPrecision mixed_precision) {
  auto zero = std::make_unique<Zero>();
  std::optional<sharding::DeepSpeedConfig> file;
  std::optional<FullyShardedDataParallelPlugin> fsdp = options.fsdp_plugin();
  if (options.deepspeed_plugin() && fsdp) {
    throw ConfigError(
        "AcceleratorOptions sets both deepspeed_plugin and fsdp_plugin; choose one (they select "
        "the same ZeRO engine)");
  }
  if (options.deepspeed_plugin()) {
    zero->plugin = *options.deepspeed_plugin();
    if (zero->plugin.hf_ds_config()) {
      file = sharding::read_deepspeed_config(*zero->plugin.hf_ds_config());
      sharding::fill_from_config_file(*file, zero->plugin);
    }
  } else if (fsdp) {
    zero->plugin = sharding::zero_plugin_of(*fsdp);
    zero->distributed_type = "FSDP";
  } else if (auto plugin =
                 sharding::deepspeed_plugin_from_environment(env, &zero->distributed_type, &file)) {
    zero->plugin = *plugin;
    if (zero->distributed_type == "FSDP") fsdp = sharding::fsdp_plugin_from_environment(env);
  } else {
    return nullptr;
  }
  sharding::check_zero_stage(zero->plugin);
  // DeepSpeed finds stage 3's units by itself: here, the model's repeated
  // blocks. FSDP finds them by its auto wrap policy.
  zero->unit_policy.policy = sharding::AutoWrapPolicy::kRepeatedBlocks;
  if (fsdp && zero->plugin.zero_stage() == 3) {
    zero->unit_policy = sharding::unit_policy_of(*fsdp);
    if (fsdp->fsdp_version() == 1) {  // FSDP 2 always prefetches one unit ahead
      zero->prefetch_forward = fsdp->forward_prefetch();
      zero->prefetch_backward = fsdp->backward_prefetch() != FsdpBackwardPrefetch::kNoPrefetch;
    }
  }
  const int stage = zero->plugin.zero_stage();
  zero->sharded_state_dict =
      stage == 3 && (!fsdp || fsdp->state_dict_type() != FsdpStateDictType::kFullStateDict);
  zero->weights_from_main_process = builds_from_main_process(zero->plugin, fsdp);
  std::vector<std::string> notes;
  if (file) {
    // The file's fp16/bf16 sections win over the job's mixed_precision.
    const MixedPrecision computed =
        sharding::resolve_mixed_precision(*file, mixed_precision, &notes);
    if (computed != mixed_precision) zero->file_precision = computed;
  }
  zero->offload = offload_for(zero->plugin, fsdp, job, env);
  if (job.is_main_process()) {
    if (zero->weights_from_main_process) {
      std::cerr << "accelerate: note: " << (fsdp ? "cpu_ram_efficient_loading" : "zero3_init_flag")
                << ": build the model inside accelerator.zero3_init() so that only the main "
                   "process holds its whole weights (every unit must then run through "
                   "unit_forward)\n";
    }
    for (const auto& note : notes) std::cerr << "accelerate: note: " << note << "\n";
    if (file) {
      for (const auto& key : file->ignored_keys) {
        std::cerr << "accelerate: note: " << file->source << ": " << key
                  << " is not used by accelerate-cpp (ignored)\n";
      }
    }
  }
  zero->file = std::move(file);
  return zero;
}

namespace {

std::vector<torch::nn::Module*> unit_modules(torch::nn::Module& module,
                                             const sharding::UnitPolicy& policy) {
  std::vector<torch::nn::Module*> found;
  for (const sharding::Unit& unit : sharding::find_units(module, policy)) {
    found.push_back(unit.module);
  }
  return found;
}

}  // namespace

void Accelerator::Zero::shard_model(const std::shared_ptr<Communicator>& communicator,
                                    torch::nn::Module& module, GradientReducer& reducer,
                                    bool units_start_free) {
  if (stage() < 3) {
    models.push_back(std::make_shared<sharding::ModelShards>(
        communicator, reducer, stage(), std::vector<int>(), /*release_units=*/false, offload));
    return;
  }
  const std::vector<torch::nn::Module*> found = unit_modules(module, unit_policy);
  const std::vector<int> unit_of = sharding::parameter_units(module, found);
  auto shards = std::make_shared<sharding::ModelShards>(
      communicator, reducer, 3, unit_of, /*release_units=*/units_start_free, offload);
  models.push_back(shards);
  units.push_back(std::make_unique<sharding::ParameterUnits>(
      shards, found, unit_of, /*reshard_after_forward=*/true, prefetch_forward, prefetch_backward,
      /*start_released=*/units_start_free));
  if (!prefetch_backward) reducer.set_overlap_reduce_scatter(false);
  unit_roots.push_back(&module);
}

ScopeGuard Accelerator::Zero::full_weights() {
  for (auto& model_units : units) model_units->gather_all();
  return ScopeGuard([this] {
    for (auto& model_units : units) model_units->release_all();
  });
}

void Accelerator::Zero::resolve_file(sharding::ProgramValues program, bool main_process) {
  if (!file || resolved) return;
  resolved = true;
  // accelerate-cpp sizes no bucket from the hidden size (bucket_cap_mb does),
  // and steps the program's own optimizer and scheduler: the file's sections
  // for them are reported, not resolved.
  program.needs_hidden_size_keys = false;
  sharding::DeepSpeedConfig checked = *file;
  checked.optimizer.reset();
  checked.scheduler.reset();
  const sharding::ResolvedDeepSpeedConfig resolved_config = sharding::resolve(checked, program);
  if (!main_process) return;
  for (const auto& note : resolved_config.notes) std::cerr << "accelerate: note: " << note << "\n";
  // A section a DummyOptim / DummyScheduler was built from is used.
  const auto mention = [&](const char* what, const std::optional<sharding::ParamSection>& section,
                           bool built_from_it) {
    if (!section || built_from_it) return;
    std::cerr << "accelerate: note: " << file->source << ": the " << what << " section ("
              << section->type << ") is not used: accelerate-cpp steps the " << what
              << " the program prepares (Accelerate would ask for DummyOptim/DummyScheduler)\n";
  };
  mention("optimizer", file->optimizer, optimizer_from_file);
  mention("scheduler", file->scheduler, schedule_from_file);
}

namespace {

// Accelerate's refusal of a stand-in without the file section it stands in for.
void require_section(const std::optional<sharding::DeepSpeedConfig>& file, bool has_section,
                     const std::string& section, const std::string& stand_in,
                     const std::string& instead) {
  if (file && has_section) return;
  throw ConfigError((file ? file->source + ": the file has no " + section + " section"
                          : std::string("the job has no DeepSpeed config file")) +
                    ", so " + stand_in +
                    " has nothing to stand in for (Accelerate refuses it too): write the "
                    "section, or declare " +
                    instead + " instead");
}

}  // namespace

void Accelerator::Zero::build_optimizer(DummyOptim& optimizer) {
  require_section(file, file && file->optimizer, "optimizer", "DummyOptim",
                  "accelerate::Optimizer<YourOptimizer>");
  sharding::ProgramValues program;
  program.lr = optimizer.lr();
  program.weight_decay = optimizer.weight_decay();
  const sharding::ResolvedParamSection section =
      sharding::resolve_optimizer_section(*file, program);
  optimizer.build(sharding::make_optimizer(section, optimizer.params(), file->source),
                  section.type);
  optimizer_from_file = true;
}

void Accelerator::Zero::build_schedule(DummyScheduler& scheduler, int world_size,
                                       bool split_batches) {
  require_section(file, file && file->scheduler, "scheduler", "DummyScheduler",
                  "accelerate::Scheduler<YourScheduler>");
  if (!scheduler.optimizer().built()) {
    throw ConfigError(
        "DummyScheduler: prepare its DummyOptim before it or in the same prepare() call");
  }
  sharding::ProgramValues program;
  program.world_size = world_size;
  program.split_batches = split_batches;
  program.lr = scheduler.optimizer().lr();
  program.warmup_num_steps = scheduler.warmup_num_steps();
  program.total_num_steps = scheduler.total_num_steps();
  const sharding::ResolvedParamSection section =
      sharding::resolve_scheduler_section(*file, program);
  scheduler.build(std::make_unique<DeepSpeedSchedule>(
      scheduler.optimizer().base_optimizer(), sharding::schedule_options(section, file->source)));
  schedule_from_file = true;
}

}  // namespace accelerate
