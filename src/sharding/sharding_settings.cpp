#include "sharding/sharding_settings.h"

#include <iostream>
#include <string>

#include "accelerate/common/errors.h"
#include "accelerate/sharding/fsdp_plugin.h"
#include "common/settings.h"
#include "sharding/hpz_partition.h"
#include "sharding/parallelism_sizes.h"
#include "sharding/plugin_from_environment.h"

namespace accelerate::sharding {

std::optional<double> ShardingSettings::clipping() const {
  const auto norm = plugin.gradient_clipping();
  return norm && *norm > 0 ? norm : std::nullopt;
}

std::optional<at::ScalarType> ShardingSettings::sixteen_bit_dtype() const {
  if (stage != ZeroStage::kParameters || !plugin.zero3_save_16bit_model()) return std::nullopt;
  if (mixed_precision == MixedPrecision::kFP16) return at::kHalf;
  if (mixed_precision == MixedPrecision::kBF16) return at::kBFloat16;
  return std::nullopt;
}

namespace {

// What of CPU offloading a job runs (prints its notes on the main process).
// Offloading moves shards between the device and host memory; on a CPU-only
// job both are the same memory, so it runs there only when asked to
// (ACCELERATE_OFFLOAD_ON_CPU_JOB: the offload path without a GPU).
Offload offload_for(const DeepSpeedPlugin& plugin,
                    const std::optional<FullyShardedDataParallelPlugin>& fsdp, const JobState& job,
                    const Environment& env) {
  const int stage = plugin.zero_stage();
  const bool fsdp_offload = fsdp && fsdp->cpu_offload();
  const bool offload_parameters =
      stage == 3 && (plugin.offload_param_device() == OffloadDevice::kCpu || fsdp_offload);
  const bool offload_optimizer =
      plugin.offload_optimizer_device() == OffloadDevice::kCpu || fsdp_offload;
  const bool copies = job.device.is_cuda() || settings::kOffloadOnCpuJob.read_or_default(env);
  Offload offload;
  // One process offloads too (its shards are the whole buckets): that is how
  // a model whose optimizer state or weights exceed one GPU trains on it.
  if (copies && stage > 0) {
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
  } else if (stage == 0) {
    std::cerr << "accelerate: note: " << requested
              << " needs ZeRO's shards, which stage 0 (data parallelism) does not make: nothing "
                 "is offloaded\n";
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

// The parallelism sizes the job runs with: AcceleratorOptions'
// parallelism_config when set (each named as its field in messages), else
// what `accelerate launch` put in the environment.
settings::LayeredValues parallelism_values(const AcceleratorOptions& options,
                                           const Environment& env) {
  settings::LayeredValues values(env);
  const std::optional<ParallelismConfig>& config = options.parallelism_config();
  if (!config) return values;
  const auto give = [&](const settings::Setting<int>& setting, const char* field, int size) {
    values.set(
        setting.variable(),
        {std::to_string(size), settings::Origin::flag(std::string("ParallelismConfig::") + field)});
  };
  values.set(settings::kUseParallelismConfig.variable(),
             {"true", settings::Origin::flag("AcceleratorOptions::parallelism_config")});
  give(settings::kParallelismDpReplicateSize, "dp_replicate_size", config->dp_replicate_size());
  give(settings::kParallelismDpShardSize, "dp_shard_size", config->dp_shard_size());
  give(settings::kParallelismSpSize, "sp_size", config->sp_size());
  give(settings::kParallelismTpSize, "tp_size", config->tp_size());
  give(settings::kParallelismCpSize, "cp_size", config->cp_size());
  values.set(settings::kParallelismTpSequenceParallel.variable(),
             {settings::kParallelismTpSequenceParallel.format(config->tp_sequence_parallel()),
              settings::Origin::flag("ParallelismConfig::tp_sequence_parallel")});
  return values;
}

std::optional<at::ScalarType> wire_dtype(const std::optional<CollectiveDtype>& dtype) {
  if (!dtype || *dtype == CollectiveDtype::kFp32) return std::nullopt;
  return *dtype == CollectiveDtype::kBf16 ? at::kBFloat16 : at::kHalf;
}

// FSDP's mixed_precision_policy or DeepSpeed's communication_data_type into
// the dtypes the collectives carry; notes where a stage leaves one unused.
void resolve_wire_dtypes(ShardingSettings& settings,
                         const std::optional<FullyShardedDataParallelPlugin>& fsdp,
                         std::vector<std::string>* notes) {
  if (fsdp) {
    const FsdpMixedPrecisionPolicy& policy = fsdp->mixed_precision_policy();
    settings.param_dtype = wire_dtype(policy.param_dtype());
    // PyTorch's MixedPrecision: an unset reduce_dtype follows param_dtype.
    settings.reduce_dtype =
        wire_dtype(policy.reduce_dtype() ? policy.reduce_dtype() : policy.param_dtype());
    if (policy.buffer_dtype() && *policy.buffer_dtype() != CollectiveDtype::kFp32) {
      notes->push_back(
          "FSDP mixed_precision_policy buffer_dtype changes nothing in accelerate-cpp: buffers "
          "travel once, in their own dtype, when prepare() starts every process alike");
    }
  } else if (settings.file) {
    settings.reduce_dtype = wire_dtype(settings.file->communication_data_type);
  }
  const char* source = fsdp ? "FSDP mixed_precision_policy" : "communication_data_type";
  if (settings.stage == ZeroStage::kDataParallel &&
      (settings.param_dtype || settings.reduce_dtype)) {
    notes->push_back(std::string(source) +
                     " changes nothing at ZeRO stage 0: data parallelism all-reduces fp32 "
                     "gradients and gathers no parameters");
    settings.param_dtype = settings.reduce_dtype = std::nullopt;
  }
  if (settings.stage == ZeroStage::kOptimizerState && settings.reduce_dtype) {
    notes->push_back(std::string(source) +
                     ": ZeRO stage 1 all-reduces fp32 gradients; the reduce dtype applies to "
                     "stages 2 and 3's reduce-scatters");
    settings.reduce_dtype = std::nullopt;
  }
}

// ZeRO++ qwZ / qgZ from DeepSpeed's config file. DeepSpeed reads them in
// its stage-3 engine only; below stage 3 they would move nothing
// quantized, so a note says so rather than letting a run look quantized.
void resolve_quantized(ShardingSettings& settings, std::vector<std::string>* notes) {
  const ZeroSettings& zero = settings.file->zero_optimization;
  if (!zero.zero_quantized_weights && !zero.zero_quantized_gradients) return;
  if (settings.stage != ZeroStage::kParameters) {
    notes->push_back(
        "zero_optimization.zero_quantized_weights / zero_quantized_gradients (ZeRO++ qwZ / qgZ) "
        "apply to ZeRO stage 3 only, as in DeepSpeed: stage " +
        std::to_string(static_cast<int>(settings.stage)) + " moves unquantized values");
    return;
  }
  settings.quantized_weights = zero.zero_quantized_weights;
  settings.quantized_gradients = zero.zero_quantized_gradients;
  if (settings.quantized_gradients && settings.reduce_dtype) {
    notes->push_back(
        "communication_data_type changes nothing under zero_quantized_gradients: the gradients "
        "travel as int4 blocks quantized from fp32");
    settings.reduce_dtype = std::nullopt;
  }
}

// The main process's notes about what the settings will do.
void print_notes(const ShardingSettings& settings, const std::vector<std::string>& notes) {
  if (settings.hybrid_shard_size > 0) {
    std::cerr << "accelerate: note: hybrid sharding: groups of " << settings.hybrid_shard_size
              << " consecutive processes shard the model, and the groups replicate it\n";
  }
  if (settings.hpz_partition_size > 1) {
    std::cerr << "accelerate: note: ZeRO++ hpZ: each group of " << settings.hpz_partition_size
              << " consecutive processes keeps a secondary copy of the gathered parameters, and "
                 "a unit's later gathers until the next step stay within it\n";
  }
  // weights_from_main_process's note waits for prepare(): a model built
  // inside zero3_init() (the Trainer's model_init) needs none.
  for (const auto& note : notes) std::cerr << "accelerate: note: " << note << "\n";
  if (settings.file) {
    for (const auto& key : settings.file->ignored_keys) {
      std::cerr << "accelerate: note: " << settings.file->source << ": " << key
                << " is not used by accelerate-cpp (ignored)\n";
    }
  }
}

// What ZeRO does not yet do on tensor-parallel parts: refused before any
// process builds a model, rather than training wrongly.
void refuse_with_tensor_parallelism(const ShardingSettings& settings, int tp) {
  const auto refuse = [tp](const std::string& what) {
    throw ConfigError("tp_size " + std::to_string(tp) + " with " + what +
                      " is not built yet: leave it off with tensor parallelism");
  };
  // Processes other than the main one build the model without weights,
  // and the main process holds only its own tensor-parallel part.
  if (settings.weights_from_main_process) {
    refuse("zero3_init_flag / fsdp_cpu_ram_efficient_loading (weights from the main process)");
  }
  if (settings.hpz_partition_size > 1) refuse("ZeRO++ hpZ (zero_hpz_partition_size)");
  if (settings.quantized_weights || settings.quantized_gradients) {
    refuse("ZeRO++ qwZ / qgZ (zero_quantized_weights / zero_quantized_gradients)");
  }
}

}  // namespace

std::optional<ParallelismSizes> job_parallelism_sizes(const AcceleratorOptions& options,
                                                      const Environment& env, const JobState& job) {
  // Accelerate 1.x's parallelism sizes, judged as the launcher judged them.
  const bool fsdp_in_use = options.fsdp_plugin().has_value() ||
                           (!options.deepspeed_plugin() && settings::kUseFsdp.read_or_default(env));
  return parallelism_sizes(parallelism_values(options, env), job.world_size, fsdp_in_use);
}

std::optional<ShardingSettings> resolve_sharding_settings(const AcceleratorOptions& options,
                                                          const Environment& env,
                                                          const JobState& job,
                                                          MixedPrecision mixed_precision) {
  ShardingSettings settings;
  std::optional<FullyShardedDataParallelPlugin> fsdp = options.fsdp_plugin();
  const std::optional<ParallelismSizes> sizes = job_parallelism_sizes(options, env, job);
  if (options.deepspeed_plugin() && fsdp) {
    throw ConfigError(
        "AcceleratorOptions sets both deepspeed_plugin and fsdp_plugin; choose one (they select "
        "the same ZeRO engine)");
  }
  if (options.deepspeed_plugin()) {
    settings.plugin = *options.deepspeed_plugin();
    if (settings.plugin.hf_ds_config()) {
      settings.file = read_deepspeed_config(*settings.plugin.hf_ds_config());
      fill_from_config_file(*settings.file, settings.plugin);
    }
  } else if (fsdp) {
    settings.plugin = zero_plugin_of(*fsdp);
    settings.distributed_type = DistributedType::kFsdp;
  } else {
    std::string launched_as;
    auto plugin = deepspeed_plugin_from_environment(env, &launched_as, &settings.file);
    if (!plugin) return std::nullopt;
    settings.plugin = *plugin;
    if (launched_as == to_string(DistributedType::kFsdp)) {
      settings.distributed_type = DistributedType::kFsdp;
      fsdp = fsdp_plugin_from_environment(env);
    }
  }
  check_zero_stage(settings.plugin);
  settings.stage = static_cast<ZeroStage>(settings.plugin.zero_stage());
  const bool stage3 = settings.stage == ZeroStage::kParameters;
  // DeepSpeed finds stage 3's units by itself: here, the model's repeated
  // blocks. FSDP finds them by its auto wrap policy.
  settings.unit_policy.policy = AutoWrapPolicy::kRepeatedBlocks;
  if (fsdp && stage3) {
    settings.unit_policy = unit_policy_of(*fsdp);
    if (fsdp->fsdp_version() == 1) {  // FSDP 2 always prefetches one unit ahead
      settings.prefetch_forward = fsdp->forward_prefetch();
      settings.prefetch_backward = fsdp->backward_prefetch() != FsdpBackwardPrefetch::kNoPrefetch;
    }
  }
  settings.sharded_state_dict =
      stage3 && (!fsdp || fsdp->state_dict_type() != FsdpStateDictType::kFullStateDict);
  settings.weights_from_main_process =
      stage3 && (settings.plugin.zero3_init_flag() || (fsdp && fsdp->cpu_ram_efficient_loading()));
  // FSDP's hybrid strategies: shard within each machine (its processes,
  // which launchers number consecutively), replicate across machines.
  // On one machine that is FULL_SHARD (or SHARD_GRAD_OP); with one process
  // per machine, nothing is sharded: data parallelism.
  if (fsdp && is_hybrid(fsdp->sharding_strategy()) && !sizes &&
      job.local_world_size < job.world_size) {
    if (job.local_world_size == 1) settings.stage = ZeroStage::kDataParallel;
    if (job.local_world_size > 1) settings.hybrid_shard_size = job.local_world_size;
    settings.weights_from_main_process = false;  // every group starts from whole weights
  }
  // Accelerate 1.x's sizes decide the groups: dp_shard_size consecutive ranks.
  if (fsdp && sizes) {
    if (settings.stage == ZeroStage::kDataParallel) {
      throw ConfigError("parallelism_config: dp_shard_size " + std::to_string(sizes->dp_shard) +
                        " shards the model but the FSDP strategy is NO_SHARD; use FULL_SHARD or "
                        "SHARD_GRAD_OP");
    }
    // Every rank of a sequence-parallel group holds the same parameters:
    // the shard groups span dp_shard_size x sp_size consecutive ranks.
    if (sizes->dp_shard * sizes->sp < job.world_size / sizes->tp) {
      settings.hybrid_shard_size = sizes->dp_shard * sizes->sp;
      settings.weights_from_main_process = false;
    }
  }
  settings.mixed_precision = mixed_precision;
  std::vector<std::string> notes;
  if (settings.file) {
    // The file's fp16/bf16 sections win over the job's mixed_precision.
    settings.mixed_precision = resolve_mixed_precision(*settings.file, mixed_precision, &notes);
    settings.mixed_precision_from_file = settings.mixed_precision != mixed_precision;
  }
  // ZeRO++ hpZ: DeepSpeed's config file only (Accelerate has no flag for it).
  if (settings.distributed_type == DistributedType::kDeepSpeed) {
    settings.hpz_partition_size =
        hpz_partition_size(settings.file, static_cast<int>(settings.stage), job.world_size,
                           job.local_world_size, &notes);
  }
  resolve_wire_dtypes(settings, fsdp, &notes);
  if (settings.file && !fsdp) resolve_quantized(settings, &notes);
  settings.offload = offload_for(settings.plugin, fsdp, job, env);
  settings.tensor_parallel_size =
      tensor_parallel_size(sizes, settings.file ? settings.file->autotp_size : 0,
                           settings.file ? settings.file->source : std::string(), job.world_size);
  if (settings.tensor_parallel_size > 1) {
    refuse_with_tensor_parallelism(settings, settings.tensor_parallel_size);
  }
  if (job.is_main_process()) print_notes(settings, notes);
  return settings;
}

}  // namespace accelerate::sharding
