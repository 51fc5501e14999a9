#include "sharding/plugin_from_environment.h"

#include "accelerate/errors.h"

namespace accelerate::sharding {
namespace {

using settings::FsdpShardingStrategy;

// Accelerate's FullyShardedDataParallelPlugin: FSDP_SHARDING_STRATEGY when
// set; else FSDP_RESHARD_AFTER_FORWARD, a strategy for FSDP 1 and a boolean
// for FSDP 2 (false keeps parameters whole between forward and backward:
// SHARD_GRAD_OP); else FULL_SHARD. (Accelerate's launcher always passes
// FSDP_SHARDING_STRATEGY, FULL_SHARD unless told otherwise, which its FSDP 1
// plugin then prefers; ours passes it only when it was given.)
FsdpShardingStrategy fsdp_strategy(const Environment& env) {
  const int version = settings::kFsdpVersion.read_or_default(env);
  const auto reshard = settings::kFsdpReshardAfterForward.read(env);
  if (auto strategy = settings::kFsdpShardingStrategy.read(env)) return *strategy;
  if (!reshard) return settings::kFsdpShardingStrategy.fallback;
  const std::string variable = settings::kFsdpReshardAfterForward.variable();
  const bool is_bool = *reshard == "true" || *reshard == "false";
  if (version == 2) {
    if (!is_bool) {
      throw ConfigError(
          variable + " is '" + *reshard +
          "', which FSDP version 2 does not take: write false (SHARD_GRAD_OP) or true "
          "(FULL_SHARD), or use FSDP version 1");
    }
    return *reshard == "true" ? FsdpShardingStrategy::kFullShard
                              : FsdpShardingStrategy::kShardGradOp;
  }
  if (is_bool) {
    throw ConfigError(
        variable + " is '" + *reshard +
        "', which FSDP version 1 does not take: write a sharding strategy (SHARD_GRAD_OP), or "
        "use FSDP version 2");
  }
  return *settings::parse_fsdp_sharding_strategy(*reshard);
}

template <class T>
void take(const AutoValue<T>& from_file, const T& when_absent, T& field) {
  if (from_file.has_value()) field = from_file.value;
  if (from_file.absent()) field = when_absent;
}

}  // namespace

int zero_stage_of(FsdpShardingStrategy strategy) {
  if (strategy == FsdpShardingStrategy::kShardGradOp) return 2;
  if (strategy == FsdpShardingStrategy::kNoShard) return 0;
  const std::string does = strategy == FsdpShardingStrategy::kFullShard
                               ? "shards parameters (ZeRO-3)"
                           : strategy == FsdpShardingStrategy::kHybridShard
                               ? "shards parameters (ZeRO-3) within each machine"
                               : "shards within each machine and replicates across machines";
  throw ConfigError("FSDP sharding strategy " + std::string(to_string(strategy)) + " " + does +
                    ", which accelerate-cpp does not have yet; use SHARD_GRAD_OP");
}

void fill_from_config_file(const DeepSpeedConfig& file, DeepSpeedPlugin& plugin) {
  const ZeroSettings& zero = file.zero_optimization;
  take(zero.stage, 0, plugin.zero_stage());
  take(zero.offload_optimizer.device, OffloadDevice::kNone, plugin.offload_optimizer_device());
  take(zero.offload_param.device, OffloadDevice::kNone, plugin.offload_param_device());
  take(zero.stage3_gather_16bit_weights_on_model_save, false, plugin.zero3_save_16bit_model());
  // Accelerate writes 1 into a file without gradient_accumulation_steps.
  if (file.gradient_accumulation_steps.has_value()) {
    plugin.gradient_accumulation_steps(static_cast<int>(file.gradient_accumulation_steps.value));
  }
  if (file.gradient_accumulation_steps.absent()) plugin.gradient_accumulation_steps(1);
  // DeepSpeed clips only when the file says so.
  if (file.gradient_clipping.has_value()) plugin.gradient_clipping(file.gradient_clipping.value);
  if (file.gradient_clipping.absent()) plugin.gradient_clipping(std::nullopt);
}

void check_zero_stage(const DeepSpeedPlugin& plugin) {
  const int stage = plugin.zero_stage();
  if (stage < 0 || stage > 3) {
    throw ConfigError("zero_stage expects 0, 1, 2 or 3, got " + std::to_string(stage));
  }
}

std::optional<DeepSpeedPlugin> deepspeed_plugin_from_environment(
    const Environment& env, std::string* distributed_type,
    std::optional<DeepSpeedConfig>* config_file) {
  const bool deepspeed = settings::kUseDeepSpeed.read_or_default(env);
  const bool fsdp = settings::kUseFsdp.read_or_default(env);
  if (deepspeed && fsdp) {
    throw ConfigError(std::string(settings::kUseDeepSpeed.variable()) + " and " +
                      settings::kUseFsdp.variable() +
                      " are both true; choose one (they select the same ZeRO engine)");
  }
  if (!deepspeed && !fsdp) return std::nullopt;
  DeepSpeedPlugin plugin;
  if (fsdp) {
    plugin.zero_stage(zero_stage_of(fsdp_strategy(env)));
    plugin.gradient_clipping(std::nullopt);  // FSDP clips only when the program calls it
    if (distributed_type != nullptr) *distributed_type = "FSDP";
    return plugin;
  }
  plugin.zero_stage(settings::kZeroStage.read_or_default(env));
  plugin.gradient_accumulation_steps(settings::kGradientAccumulationSteps.read(env));
  // Not set: the plugin's 1.0, Accelerate's "auto".
  if (auto clipping = settings::kGradientClipping.read(env)) plugin.gradient_clipping(*clipping);
  plugin.offload_optimizer_device(settings::kOffloadOptimizerDevice.read_or_default(env));
  plugin.offload_param_device(settings::kOffloadParamDevice.read_or_default(env));
  plugin.zero3_save_16bit_model(settings::kZero3Save16BitModel.read_or_default(env));
  const std::string file = settings::kDeepSpeedConfigFile.read_or_default(env);
  if (file != "none") {  // Accelerate's spelling of "no file"
    plugin.hf_ds_config(file);
    DeepSpeedConfig parsed = read_deepspeed_config(file);
    fill_from_config_file(parsed, plugin);
    if (config_file != nullptr) *config_file = std::move(parsed);
  }
  // Accelerate: on by default at stage 3, and switched off below it.
  const std::optional<bool> zero3_init = settings::kZero3Init.read(env);
  plugin.zero3_init_flag(plugin.zero_stage() == 3 && zero3_init.value_or(true));
  if (distributed_type != nullptr) *distributed_type = "DEEPSPEED";
  return plugin;
}

}  // namespace accelerate::sharding
