// `accelerate launch`'s check of sharded training (ZeRO through DeepSpeed's
// or FSDP's settings) before anything starts: the settings the ranks will
// get, judged exactly as the ranks judge them
// (sharding::deepspeed_plugin_from_settings on launch_setting_values, what
// the ranks' environment is written from), so
// TRANSFORMER_BASED_WRAP without class names, cpu_ram_efficient_loading
// without sync_module_states, or a
// DeepSpeed JSON file that cannot be used fails here, in one line, and not
// in every rank.
#pragma once

#include <string>
#include <vector>

#include "accelerate/common/environment.h"
#include "launcher/launch_options.h"

namespace accelerate::launcher {

// `options` must be resolved (resolve_launch_options). Throws UsageError for
// what the ranks would refuse before they see the model or the device, for
// a --mixed_precision that the DeepSpeed JSON file contradicts, and, when
// the ranks will run on the CPU (`cpu_job`), for fp16 mixed precision, naming
// the flag, config file key and line, variable or DeepSpeed file key that
// asked for it; every refusal names where its deciding value was written.
// Returns notes (one line each) for DeepSpeed flags given without DeepSpeed
// in use, and FSDP flags without FSDP.
std::vector<std::string> check_sharded_training(const LaunchOptions& options,
                                                const Environment& launcher_environment,
                                                bool cpu_job = false);

}  // namespace accelerate::launcher
