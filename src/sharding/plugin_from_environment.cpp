#include "sharding/plugin_from_environment.h"

#include <initializer_list>
#include <sstream>

#include "accelerate/common/errors.h"

namespace accelerate::sharding {
namespace {

using settings::FsdpShardingStrategy;

// Accelerate's FullyShardedDataParallelPlugin: FSDP_SHARDING_STRATEGY when
// set; else FSDP_RESHARD_AFTER_FORWARD, a strategy for FSDP 1 and a boolean
// for FSDP 2 (false keeps parameters whole between forward and backward:
// SHARD_GRAD_OP); else FULL_SHARD. (Accelerate's launcher always passes
// FSDP_SHARDING_STRATEGY, FULL_SHARD unless told otherwise, which its FSDP 1
// plugin then prefers; ours passes it only when it was given.)
FsdpShardingStrategy fsdp_strategy(const settings::SettingValues& values) {
  const int version = settings::kFsdpVersion.read_or_default(values);
  const auto reshard = settings::kFsdpReshardAfterForward.read(values);
  if (auto strategy = settings::kFsdpShardingStrategy.read(values)) return *strategy;
  if (!reshard) return settings::kFsdpShardingStrategy.fallback;
  const std::string variable = settings::kFsdpReshardAfterForward.origin(values)->subject();
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

// Accelerate splits FSDP_TRANSFORMER_CLS_TO_WRAP at commas; the names are
// also trimmed of spaces here ("Block, Mlp"), and empty ones dropped.
std::vector<std::string> split_class_names(const std::vector<std::string>& lists) {
  std::vector<std::string> names;
  for (const std::string& list : lists) {
    std::stringstream items(list);
    for (std::string item; std::getline(items, item, ',');) {
      const auto first = item.find_first_not_of(" \t");
      if (first == std::string::npos) continue;
      names.push_back(item.substr(first, item.find_last_not_of(" \t") - first + 1));
    }
  }
  return names;
}

// Accelerate's rule: without syncing module states, every process but the
// main one would keep the empty weights cpu_ram_efficient_loading builds.
void check_ram_efficient_loading(const FullyShardedDataParallelPlugin& plugin) {
  if (plugin.cpu_ram_efficient_loading() && !plugin.sync_module_states()) {
    throw ConfigError(
        "FSDP cpu_ram_efficient_loading is true but sync_module_states is false; Accelerate "
        "requires sync_module_states to be true when cpu_ram_efficient_loading is true (every "
        "process but the main one would keep empty weights): set fsdp_sync_module_states to "
        "true, or fsdp_cpu_ram_efficient_loading to false");
  }
}

// Runs `check`; a ConfigError it throws is prefixed with where the settings
// that decide it were written, those of `variables` that `values` give:
// "--fsdp_sharding_strategy: ...", "cfg.yaml:9: key 'fsdp_config.x': ...",
// "FSDP_SHARDING_STRATEGY: ...". A default decided nothing and is not named.
template <class Check>
void naming_origins(const settings::SettingValues& values,
                    std::initializer_list<const char*> variables, Check check) {
  try {
    check();
  } catch (const ConfigError& error) {
    std::string origins;
    for (const char* variable : variables) {
      if (auto given = values.find(variable)) {
        origins += (origins.empty() ? "" : ", ") + given->origin.subject();
      }
    }
    if (origins.empty()) throw;
    throw ConfigError(origins + ": " + error.what());
  }
}

template <class T>
void take(const AutoValue<T>& from_file, const T& when_absent, T& field) {
  if (from_file.has_value()) field = from_file.value;
  if (from_file.absent()) field = when_absent;
}

}  // namespace

int zero_stage_of(FsdpShardingStrategy strategy) {
  switch (strategy) {
    case FsdpShardingStrategy::kFullShard:
    case FsdpShardingStrategy::kHybridShard:
      return 3;
    case FsdpShardingStrategy::kShardGradOp:
    case FsdpShardingStrategy::kHybridShardZero2:
      return 2;
    case FsdpShardingStrategy::kNoShard:
      return 0;
  }
  throw ConfigError("FSDP sharding strategy " + std::to_string(static_cast<int>(strategy)) +
                    " is not one of FSDP's");
}

bool is_hybrid(FsdpShardingStrategy strategy) {
  return strategy == FsdpShardingStrategy::kHybridShard ||
         strategy == FsdpShardingStrategy::kHybridShardZero2;
}

UnitPolicy unit_policy_of(const FullyShardedDataParallelPlugin& plugin) {
  UnitPolicy policy;
  switch (plugin.auto_wrap_policy()) {
    case FsdpAutoWrapPolicy::kTransformerBasedWrap:
      policy.policy = AutoWrapPolicy::kTransformerBased;
      policy.layer_classes = split_class_names(plugin.transformer_cls_names_to_wrap());
      // Accelerate falls back to a Transformers model's _no_split_modules,
      // which a C++ model does not have.
      if (policy.layer_classes.empty()) {
        throw ConfigError(
            "FSDP auto wrap policy TRANSFORMER_BASED_WRAP needs the class names of the model's "
            "blocks: set fsdp_transformer_layer_cls_to_wrap (e.g. Block), or use SIZE_BASED_WRAP "
            "or NO_WRAP");
      }
      break;
    case FsdpAutoWrapPolicy::kSizeBasedWrap:
      policy.policy = AutoWrapPolicy::kSizeBased;
      policy.min_num_params = plugin.min_num_params();
      break;
    case FsdpAutoWrapPolicy::kNoWrap:
      policy.policy = AutoWrapPolicy::kNoWrap;
      break;
  }
  return policy;
}

DeepSpeedPlugin zero_plugin_of(const FullyShardedDataParallelPlugin& plugin) {
  const int version = plugin.fsdp_version();
  if (version != 1 && version != 2) {
    throw ConfigError(settings::kFsdpVersion.problem("fsdp_version", std::to_string(version)));
  }
  int stage = zero_stage_of(plugin.sharding_strategy());
  // FSDP 2's spelling of SHARD_GRAD_OP: parameters stay whole until backward.
  if (stage == 3 && !plugin.reshard_after_forward()) stage = 2;
  if (stage == 3) unit_policy_of(plugin);  // refused here, before any model is seen
  check_ram_efficient_loading(plugin);
  DeepSpeedPlugin zero;
  zero.zero_stage(stage);
  zero.gradient_clipping(std::nullopt);  // FSDP clips only when the program calls it
  return zero;
}

std::optional<FullyShardedDataParallelPlugin> fsdp_plugin_from_settings(
    const settings::SettingValues& values) {
  if (!settings::kUseFsdp.read_or_default(values)) return std::nullopt;
  FullyShardedDataParallelPlugin plugin;
  const int version = settings::kFsdpVersion.read_or_default(values);
  plugin.fsdp_version(version);
  plugin.sharding_strategy(fsdp_strategy(values));
  plugin.auto_wrap_policy(settings::kFsdpAutoWrapPolicy.read_or_default(values));
  if (plugin.auto_wrap_policy() == FsdpAutoWrapPolicy::kTransformerBasedWrap) {
    if (auto names = settings::kFsdpTransformerClsToWrap.read(values)) {
      plugin.transformer_cls_names_to_wrap(split_class_names({*names}));
    }
  }
  if (plugin.auto_wrap_policy() == FsdpAutoWrapPolicy::kSizeBasedWrap) {
    plugin.min_num_params(settings::kFsdpMinNumParams.read_or_default(values));
  }
  // FSDP 2 has no backward prefetch (Accelerate drops it with a warning),
  // and Accelerate reads forward prefetch for FSDP 1 only.
  if (version == 1) {
    plugin.backward_prefetch(settings::kFsdpBackwardPrefetch.read_or_default(values));
    plugin.forward_prefetch(settings::kFsdpForwardPrefetch.read_or_default(values));
  }
  plugin.cpu_offload(settings::kFsdpOffloadParams.read_or_default(values));
  plugin.state_dict_type(settings::kFsdpStateDictType.read(values).value_or(
      version == 2 ? FsdpStateDictType::kShardedStateDict : FsdpStateDictType::kFullStateDict));
  plugin.cpu_ram_efficient_loading(settings::kFsdpCpuRamEfficientLoading.read_or_default(values));
  plugin.sync_module_states(settings::kFsdpSyncModuleStates.read_or_default(values));
  naming_origins(values,
                 {settings::kFsdpCpuRamEfficientLoading.variable(),
                  settings::kFsdpSyncModuleStates.variable()},
                 [&] { check_ram_efficient_loading(plugin); });
  return plugin;
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

std::optional<DeepSpeedPlugin> deepspeed_plugin_from_settings(
    const settings::SettingValues& values, std::string* distributed_type,
    std::optional<DeepSpeedConfig>* config_file) {
  const bool deepspeed = settings::kUseDeepSpeed.read_or_default(values);
  const bool fsdp = settings::kUseFsdp.read_or_default(values);
  if (deepspeed && fsdp) {
    throw ConfigError(settings::kUseDeepSpeed.origin(values)->subject() + " and " +
                      settings::kUseFsdp.origin(values)->subject() +
                      " are both true; choose one (they select the same ZeRO engine)");
  }
  if (!deepspeed && !fsdp) return std::nullopt;
  DeepSpeedPlugin plugin;
  if (fsdp) {
    const FullyShardedDataParallelPlugin fsdp_plugin = *fsdp_plugin_from_settings(values);
    // What zero_plugin_of can refuse of parsed values: stage 3's units.
    naming_origins(values, {settings::kFsdpAutoWrapPolicy.variable()},
                   [&] { plugin = zero_plugin_of(fsdp_plugin); });
    if (distributed_type != nullptr) *distributed_type = "FSDP";
    return plugin;
  }
  plugin.zero_stage(settings::kZeroStage.read_or_default(values));
  plugin.gradient_accumulation_steps(settings::kGradientAccumulationSteps.read(values));
  // Not set: the plugin's 1.0, Accelerate's "auto".
  if (auto clipping = settings::kGradientClipping.read(values)) plugin.gradient_clipping(*clipping);
  plugin.offload_optimizer_device(settings::kOffloadOptimizerDevice.read_or_default(values));
  plugin.offload_param_device(settings::kOffloadParamDevice.read_or_default(values));
  plugin.zero3_save_16bit_model(settings::kZero3Save16BitModel.read_or_default(values));
  const std::string file = settings::kDeepSpeedConfigFile.read_or_default(values);
  if (file != "none") {  // Accelerate's spelling of "no file"
    plugin.hf_ds_config(file);
    DeepSpeedConfig parsed = read_deepspeed_config(file);
    fill_from_config_file(parsed, plugin);
    if (config_file != nullptr) *config_file = std::move(parsed);
  }
  // Accelerate: on by default at stage 3, and switched off below it.
  const std::optional<bool> zero3_init = settings::kZero3Init.read(values);
  plugin.zero3_init_flag(plugin.zero_stage() == 3 && zero3_init.value_or(true));
  if (distributed_type != nullptr) *distributed_type = "DEEPSPEED";
  return plugin;
}

std::optional<FullyShardedDataParallelPlugin> fsdp_plugin_from_environment(const Environment& env) {
  return fsdp_plugin_from_settings(settings::EnvironmentValues(env));
}

std::optional<DeepSpeedPlugin> deepspeed_plugin_from_environment(
    const Environment& env, std::string* distributed_type,
    std::optional<DeepSpeedConfig>* config_file) {
  return deepspeed_plugin_from_settings(settings::EnvironmentValues(env), distributed_type,
                                        config_file);
}

}  // namespace accelerate::sharding
