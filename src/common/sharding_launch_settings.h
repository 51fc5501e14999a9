// The launch settings of sharded training, one row each: the flag
// (--zero_stage), the config file key (deepspeed_config.zero_stage), the
// LaunchOptions field (zero_stage), the variable the ranks read
// (ACCELERATE_DEEPSPEED_ZERO_STAGE), the parser, the default and the help
// text all come from the row and the Setting it names (settings.h). The
// launcher's flag table, its options, the config keys it accepts, the flags
// it reports as unused and the variables it writes for the ranks are
// generated from this list, as c10 generates ScalarType's names and sizes
// from AT_FORALL_SCALAR_TYPES; a new setting is one row here and one
// Setting in settings.cpp.
//
// X(section, name, Type, setting, metavar, yaml):
//   section  deepspeed_config, fsdp_config or parallelism_config: the config
//            file's section, and which switch (--use_deepspeed / --use_fsdp /
//            --use_parallelism_config) puts the row in use
//   name     the flag, the key in the section, the LaunchOptions field
//   Type     the value's type (LaunchOptions holds std::optional<Type>)
//   setting  the Setting in accelerate::settings
//   metavar  the value's name in --help
//   yaml     the key's type in a config file: S (string), I (int), B (bool)
//
// LibTorch-free: the command line includes it.
#pragma once

#include <string>
#include <vector>

#include "common/settings.h"

#define ACCELERATE_SHARDING_LAUNCH_SETTINGS(X)                                                    \
  X(deepspeed_config, zero_stage, int, kZeroStage, "0-3", I)                                      \
  X(deepspeed_config, deepspeed_config_file, std::string, kDeepSpeedConfigFile, "FILE", S)        \
  X(deepspeed_config, gradient_clipping, double, kGradientClipping, "NORM", S)                    \
  X(deepspeed_config, offload_optimizer_device, ::accelerate::OffloadDevice,                      \
    kOffloadOptimizerDevice, "none|cpu", S)                                                       \
  X(deepspeed_config, offload_param_device, ::accelerate::OffloadDevice, kOffloadParamDevice,     \
    "none|cpu", S)                                                                                \
  X(deepspeed_config, zero3_init_flag, bool, kZero3Init, "true|false", B)                         \
  X(deepspeed_config, zero3_save_16bit_model, bool, kZero3Save16BitModel, "true|false", B)        \
  X(fsdp_config, fsdp_sharding_strategy, ::accelerate::FsdpShardingStrategy,                      \
    kFsdpShardingStrategy, "STRATEGY", S)                                                         \
  X(fsdp_config, fsdp_reshard_after_forward, std::string, kFsdpReshardAfterForward, "VALUE", S)   \
  X(fsdp_config, fsdp_version, int, kFsdpVersion, "1|2", I)                                       \
  X(fsdp_config, fsdp_auto_wrap_policy, ::accelerate::FsdpAutoWrapPolicy, kFsdpAutoWrapPolicy,    \
    "POLICY", S)                                                                                  \
  X(fsdp_config, fsdp_transformer_layer_cls_to_wrap, std::string, kFsdpTransformerClsToWrap,      \
    "CLASSES", S)                                                                                 \
  X(fsdp_config, fsdp_min_num_params, int64_t, kFsdpMinNumParams, "N", I)                         \
  X(fsdp_config, fsdp_backward_prefetch, ::accelerate::FsdpBackwardPrefetch,                      \
    kFsdpBackwardPrefetch, "POLICY", S)                                                           \
  X(fsdp_config, fsdp_forward_prefetch, bool, kFsdpForwardPrefetch, "true|false", B)              \
  X(fsdp_config, fsdp_offload_params, bool, kFsdpOffloadParams, "true|false", B)                  \
  X(fsdp_config, fsdp_state_dict_type, ::accelerate::FsdpStateDictType, kFsdpStateDictType,       \
    "TYPE", S)                                                                                    \
  X(fsdp_config, fsdp_cpu_ram_efficient_loading, bool, kFsdpCpuRamEfficientLoading, "true|false", \
    B)                                                                                            \
  X(fsdp_config, fsdp_sync_module_states, bool, kFsdpSyncModuleStates, "true|false", B)           \
  X(parallelism_config, parallelism_config_dp_replicate_size, int, kParallelismDpReplicateSize,   \
    "N", I)                                                                                       \
  X(parallelism_config, parallelism_config_dp_shard_size, int, kParallelismDpShardSize, "N", I)   \
  X(parallelism_config, parallelism_config_sp_size, int, kParallelismSpSize, "N", I)              \
  X(parallelism_config, parallelism_config_sp_backend, std::string, kParallelismSpBackend,        \
    "deepspeed", S)                                                                               \
  X(parallelism_config, parallelism_config_tp_size, int, kParallelismTpSize, "N", I)              \
  X(parallelism_config, parallelism_config_tp_sequence_parallel, bool,                            \
    kParallelismTpSequenceParallel, "true|false", B)                                              \
  X(parallelism_config, parallelism_config_cp_size, int, kParallelismCpSize, "N", I)

namespace accelerate::settings {

// A row of the list, as data (for checks, notes and tests).
struct ShardingLaunchSetting {
  const char* section;  // "deepspeed_config" or "fsdp_config"
  const char* name;     // "zero_stage"
  const char* metavar;  // "0-3"
  const Description* about;
};

// Every row, in the list's order.
const std::vector<ShardingLaunchSetting>& sharding_launch_settings();
// The names of the rows of one section ("deepspeed_config" or "fsdp_config").
std::vector<std::string> sharding_setting_names(const std::string& section);

}  // namespace accelerate::settings
