// Accelerator::Zero::configure: which ZeRO setting a job runs with.
#include "accelerator/accelerator_zero.h"

#include <iostream>

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
  if (options.deepspeed_plugin()) {
    zero->plugin = *options.deepspeed_plugin();
    if (zero->plugin.hf_ds_config()) {
      file = sharding::read_deepspeed_config(*zero->plugin.hf_ds_config());
      sharding::fill_from_config_file(*file, zero->plugin);
    }
  } else if (auto plugin =
                 sharding::deepspeed_plugin_from_environment(env, &zero->distributed_type, &file)) {
    zero->plugin = *plugin;
  } else {
    return nullptr;
  }
  sharding::check_zero_stage(zero->plugin);
  const int stage = zero->plugin.zero_stage();
  if (file) {
    sharding::check_mixed_precision(*file, mixed_precision);
    const auto on = [](const auto& section) {
      return section.enabled.has_value() && section.enabled.value;
    };
    if (mixed_precision == MixedPrecision::kNo && on(file->fp16)) {
      zero->file_precision = MixedPrecision::kFP16;
    }
    if (mixed_precision == MixedPrecision::kNo && on(file->bf16)) {
      zero->file_precision = MixedPrecision::kBF16;
    }
  }
  const bool cuda = job.device.is_cuda();
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
      std::cerr << "accelerate: note: offload_param_device applies to ZeRO stage 3; ignored at "
                   "stage "
                << stage << "\n";
    }
    if (file) {
      for (const auto& key : file->ignored_keys) {
        std::cerr << "accelerate: note: " << file->source << ": " << key
                  << " is not used by accelerate-cpp (ignored)\n";
      }
    }
  }
  return zero;
}

}  // namespace accelerate
