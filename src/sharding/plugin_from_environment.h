// The DeepSpeedPlugin a launched program gets from `accelerate launch`:
// Accelerate's DeepSpeedPlugin.__post_init__ reading the ACCELERATE_DEEPSPEED_*
// variables, and its FSDP plugin's sharding strategy mapped onto the ZeRO
// stage that does the same (docs/launching.md, "Sharded training").
// LibTorch-free: the launcher runs it on a rank's environment before it
// starts anything, so the ranks and the launcher judge the same values alike.
#pragma once

#include <optional>
#include <string>

#include "accelerate/deepspeed_plugin.h"
#include "accelerate/environment.h"
#include "common/settings.h"
#include "sharding/deepspeed_config.h"

namespace accelerate::sharding {

// From ACCELERATE_USE_DEEPSPEED and the ACCELERATE_DEEPSPEED_* variables, or
// from ACCELERATE_USE_FSDP with FSDP_SHARDING_STRATEGY (else
// FSDP_RESHARD_AFTER_FORWARD, read as FSDP_VERSION says, else Accelerate's
// FULL_SHARD): SHARD_GRAD_OP is stage 2, NO_SHARD stage 0. nullopt when
// neither is set; *distributed_type (when not null) becomes "DEEPSPEED" or
// "FSDP" otherwise. With ACCELERATE_DEEPSPEED_CONFIG_FILE the JSON file is
// read (read_deepspeed_config) and fills the plugin as fill_from_config_file
// says. Throws ConfigError (one line) for a bad value, both variables set,
// a strategy that shards parameters, or a file that cannot be used.
// `config_file` (when not null) receives the parsed JSON file, if any, so
// that callers need not read it again.
std::optional<DeepSpeedPlugin> deepspeed_plugin_from_environment(
    const Environment& env, std::string* distributed_type,
    std::optional<DeepSpeedConfig>* config_file = nullptr);

// The stages accelerate-cpp runs: 0, 1 and 2. ConfigError (one line) for 3
// (not available yet) and anything else; the launcher and the Accelerator
// both judge a plugin by it.
void check_zero_stage(const DeepSpeedPlugin& plugin);

// Accelerate's last step when a plugin has a DeepSpeed config file: a value
// the file gives wins over the plugin's, "auto" keeps the plugin's, and a
// key the file leaves out takes DeepSpeed's default (stage 0, no clipping,
// no offloading, accumulation 1), so the plugin says what the file runs.
void fill_from_config_file(const DeepSpeedConfig& file, DeepSpeedPlugin& plugin);

// The ZeRO stage an FSDP sharding strategy is: SHARD_GRAD_OP 2, NO_SHARD 0.
// Throws ConfigError for the strategies accelerate-cpp cannot run
// (FULL_SHARD and HYBRID_SHARD shard parameters; the HYBRID ones shard
// within a machine and replicate across machines).
int zero_stage_of(settings::FsdpShardingStrategy strategy);

}  // namespace accelerate::sharding
