// The DeepSpeedPlugin a launched program gets from `accelerate launch`:
// Accelerate's DeepSpeedPlugin.__post_init__ reading the ACCELERATE_DEEPSPEED_*
// variables, and its FullyShardedDataParallelPlugin's reading the FSDP_*
// ones, whose sharding strategy is mapped onto the ZeRO stage that does the
// same and whose wrap policy picks stage 3's units (docs/launching.md,
// "Sharded training").
// LibTorch-free: the launcher runs it on a rank's environment before it
// starts anything, so the ranks and the launcher judge the same values alike.
#pragma once

#include <optional>
#include <string>

#include "accelerate/common/environment.h"
#include "accelerate/sharding/deepspeed_plugin.h"
#include "accelerate/sharding/fsdp_plugin.h"
#include "common/settings.h"
#include "sharding/deepspeed_config.h"
#include "sharding/unit_policy.h"

namespace accelerate::sharding {

// From ACCELERATE_USE_DEEPSPEED and the ACCELERATE_DEEPSPEED_* variables, or
// from ACCELERATE_USE_FSDP and the FSDP_* variables (fsdp_plugin_from_environment,
// then zero_plugin_of). nullopt when neither is set; *distributed_type (when
// not null) becomes "DEEPSPEED" or "FSDP" otherwise. With
// ACCELERATE_DEEPSPEED_CONFIG_FILE the JSON file is read
// (read_deepspeed_config) and fills the plugin as fill_from_config_file
// says. Throws ConfigError (one line) for a bad value, both variables set,
// an FSDP plugin zero_plugin_of refuses, or a file that cannot be used.
// `config_file` (when not null) receives the parsed JSON file, if any, so
// that callers need not read it again.
//
// deepspeed_plugin_from_settings reads the same values from `values`
// (the launcher's, before any environment exists); its messages name where
// each deciding value was written (settings::Origin).
std::optional<DeepSpeedPlugin> deepspeed_plugin_from_settings(
    const settings::SettingValues& values, std::string* distributed_type,
    std::optional<DeepSpeedConfig>* config_file = nullptr);
std::optional<DeepSpeedPlugin> deepspeed_plugin_from_environment(
    const Environment& env, std::string* distributed_type,
    std::optional<DeepSpeedConfig>* config_file = nullptr);

// The stages accelerate-cpp runs: 0 to 3. ConfigError (one line) for
// anything else; the launcher and the Accelerator both judge a plugin by it.
void check_zero_stage(const DeepSpeedPlugin& plugin);

// Accelerate's last step when a plugin has a DeepSpeed config file: a value
// the file gives wins over the plugin's, "auto" keeps the plugin's, and a
// key the file leaves out takes DeepSpeed's default (stage 0, no clipping,
// no offloading, accumulation 1), so the plugin says what the file runs.
void fill_from_config_file(const DeepSpeedConfig& file, DeepSpeedPlugin& plugin);

// Accelerate's FullyShardedDataParallelPlugin.__post_init__ on the FSDP_*
// variables, when ACCELERATE_USE_FSDP is true (else nullopt): the strategy
// is FSDP_SHARDING_STRATEGY, else FSDP_RESHARD_AFTER_FORWARD read as
// FSDP_VERSION says, else FULL_SHARD; the class names are read for
// TRANSFORMER_BASED_WRAP and FSDP_MIN_NUM_PARAMS for SIZE_BASED_WRAP only.
// ConfigError naming the variable for a value that does not parse, and
// (Accelerate's rule) naming both settings for
// FSDP_CPU_RAM_EFFICIENT_LOADING true with FSDP_SYNC_MODULE_STATES false.
std::optional<FullyShardedDataParallelPlugin> fsdp_plugin_from_settings(
    const settings::SettingValues& values);
std::optional<FullyShardedDataParallelPlugin> fsdp_plugin_from_environment(const Environment& env);

// The ZeRO stage an FSDP sharding strategy is: FULL_SHARD and HYBRID_SHARD
// 3, SHARD_GRAD_OP and HYBRID_SHARD_ZERO2 2, NO_SHARD 0.
int zero_stage_of(settings::FsdpShardingStrategy strategy);
// HYBRID_SHARD and HYBRID_SHARD_ZERO2: shard within each machine, replicate
// across machines (ShardingSettings::hybrid_shard_size).
bool is_hybrid(settings::FsdpShardingStrategy strategy);

// The DeepSpeedPlugin that runs `plugin` on the ZeRO engine: its stage
// (FULL_SHARD with reshard_after_forward false is SHARD_GRAD_OP, stage 2),
// no clipping (FSDP clips only when the program asks). Throws ConfigError
// for an fsdp_version other than 1 or 2, at stage 3
// what unit_policy_of refuses, and cpu_ram_efficient_loading true with
// sync_module_states false (Accelerate's rule).
DeepSpeedPlugin zero_plugin_of(const FullyShardedDataParallelPlugin& plugin);

// How stage 3 finds the units under the plugin's auto_wrap_policy (class
// names trimmed of spaces, empty ones dropped). Throws ConfigError for
// TRANSFORMER_BASED_WRAP without a class name; a class the model lacks is
// refused by find_units, when prepare() sees the model.
UnitPolicy unit_policy_of(const FullyShardedDataParallelPlugin& plugin);

}  // namespace accelerate::sharding
