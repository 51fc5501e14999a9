// Accelerator::Zero::configure: which ZeRO setting a job runs with.
#include "accelerator/accelerator_zero.h"

#include <iostream>
#include <string>

#include <torch/nn/module.h>

#include "accelerate/errors.h"
#include "sharding/deepspeed_config.h"
#include "sharding/plugin_from_environment.h"

namespace accelerate {
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
  if (fsdp && zero->plugin.zero_stage() == 3) zero->unit_policy = sharding::unit_policy_of(*fsdp);
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
  const bool cuda = job.device.is_cuda();
  if (zero->plugin.offload_param_device() == OffloadDevice::kCpu && cuda && stage == 3) {
    throw ConfigError(
        "offload_param_device cpu is not available yet in accelerate-cpp (the parameters stay "
        "on the GPU); use none");
  }
  if (fsdp && fsdp->cpu_offload() && cuda) {
    throw ConfigError(
        "FSDP cpu_offload (fsdp_offload_params) is not available yet in accelerate-cpp (the "
        "parameters and gradients stay on the GPU); set it to false");
  }
  if (zero->plugin.offload_optimizer_device() == OffloadDevice::kCpu && cuda) {
    throw ConfigError(
        "offload_optimizer_device cpu is not available yet in accelerate-cpp (the optimizer "
        "state stays on the GPU); use none");
  }
  if (job.is_main_process()) {
    if (zero->plugin.offload_optimizer_device() == OffloadDevice::kCpu) {
      std::cerr << "accelerate: note: offload_optimizer_device cpu changes nothing in a CPU-only "
                   "job: the optimizer state is in CPU memory already\n";
    }
    if (zero->plugin.offload_param_device() == OffloadDevice::kCpu) {
      if (stage == 3) {
        std::cerr << "accelerate: note: offload_param_device cpu changes nothing in a CPU-only "
                     "job: the parameters are in CPU memory already\n";
      } else {
        std::cerr << "accelerate: note: offload_param_device applies to ZeRO stage 3; ignored at "
                     "stage "
                  << stage << "\n";
      }
    }
    if (zero->weights_from_main_process) {
      std::cerr << "accelerate: note: " << (fsdp ? "cpu_ram_efficient_loading" : "zero3_init_flag")
                << ": build the model inside accelerator.zero3_init() so that only the main "
                   "process holds its whole weights (every unit must then run through "
                   "unit_forward)\n";
    }
    // (FSDP's backward_prefetch / forward_prefetch need no note: stage 3
    // always prefetches the next unit's gather, as DeepSpeed does.)
    if (fsdp && fsdp->cpu_offload()) {
      std::cerr << "accelerate: note: FSDP cpu_offload changes nothing in a CPU-only job: the "
                   "parameters and gradients are in CPU memory already\n";
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
    models.push_back(std::make_shared<sharding::ModelShards>(communicator, reducer, stage()));
    return;
  }
  const std::vector<torch::nn::Module*> found = unit_modules(module, unit_policy);
  const std::vector<int> unit_of = sharding::parameter_units(module, found);
  auto shards = std::make_shared<sharding::ModelShards>(communicator, reducer, 3, unit_of,
                                                        /*release_units=*/units_start_free);
  models.push_back(shards);
  units.push_back(std::make_unique<sharding::ParameterUnits>(
      shards, found, unit_of, /*reshard_after_forward=*/true, /*prefetch=*/true,
      /*start_released=*/units_start_free));
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
  const auto mention = [&](const char* what, const std::optional<sharding::ParamSection>& section) {
    if (!section) return;
    std::cerr << "accelerate: note: " << file->source << ": the " << what << " section ("
              << section->type << ") is not used: accelerate-cpp steps the " << what
              << " the program prepares (Accelerate would ask for DummyOptim/DummyScheduler)\n";
  };
  mention("optimizer", file->optimizer);
  mention("scheduler", file->scheduler);
}

}  // namespace accelerate
