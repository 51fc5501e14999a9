// Accelerate's DeepSpeedPlugin: sharded data parallelism (ZeRO) for the
// models and optimizers an Accelerator prepares. accelerate-cpp runs ZeRO
// itself, on the same collectives as data parallelism (no DeepSpeed
// library); docs/sharding.md says what each stage shards, what it costs and
// where it differs from DeepSpeed.
//
//   Accelerator
//   accelerator(AcceleratorOptions().deepspeed_plugin(DeepSpeedPlugin().zero_stage(2)));
//   accelerator.prepare(model, optimizer, loader);  // the model before its optimizer
//
// `accelerate launch` builds the same plugin for the program from a config
// file's deepspeed_config (or fsdp_config) and flags such as --zero_stage,
// through the ACCELERATE_DEEPSPEED_* variables (docs/launching.md).
#pragma once

#include <optional>
#include <string>

#include "accelerate/common/arg.h"
#include "accelerate/detail/enum_names.h"

namespace accelerate {

// Where ZeRO keeps what a process does not compute with: DeepSpeed's
// offload_optimizer / offload_param "device". DeepSpeed's "nvme" is not
// supported.
enum class OffloadDevice { kNone, kCpu };

// "none" or "cpu", as DeepSpeed and Accelerate write them (read in any
// case: Accelerate's launcher lowercases them).
namespace detail {
inline constexpr EnumName<OffloadDevice> kOffloadDeviceNames[] = {{OffloadDevice::kNone, "none"},
                                                                  {OffloadDevice::kCpu, "cpu"}};
static_assert(names_are_distinct(kOffloadDeviceNames));
}  // namespace detail

inline const char* to_string(OffloadDevice device) {
  return detail::enum_name(detail::kOffloadDeviceNames, device, "none");
}

struct DeepSpeedPlugin {
  // A DeepSpeed JSON config file (docs/deepspeed-config.md). When given, its
  // values win over the fields below, whose values fill its "auto" entries.
  ACCELERATE_ARG(std::optional<std::string>, hf_ds_config);
  // 0: data parallelism (every process keeps everything). 1: each process
  // keeps the optimizer state of its shard of the parameters only. 2: and
  // only its shard of the averaged gradients. 3: and only its shard of the
  // parameters of each unit, gathered while the unit runs (the model calls
  // its blocks through accelerate::unit_forward, docs/sharding.md).
  // Accelerate's default is 2.
  ACCELERATE_ARG(int, zero_stage) = 2;
  // Micro-batches per optimizer step; nullopt: the Accelerator's own
  // gradient_accumulation_steps (Accelerate's "auto").
  ACCELERATE_ARG(std::optional<int>, gradient_accumulation_steps);
  // Clip the gradients to this global norm at every optimizer step. The
  // default, 1.0, is what Accelerate's DeepSpeed runs with when nothing sets
  // it (its "auto"); nullopt or 0: no clipping here (the program may still
  // call clip_grad_norm_). FSDP configs do not clip.
  ACCELERATE_ARG(std::optional<double>, gradient_clipping) = 1.0;
  // Keep the optimizer state and its step (offload_optimizer_device, any
  // stage) or the parameters' shards (offload_param_device, stage 3; their
  // optimizer then steps on the CPU too) in CPU memory. Default: on the
  // device. Needs two processes or more; a CPU-only job keeps everything in
  // CPU memory anyway (docs/sharding.md, "CPU offloading").
  ACCELERATE_ARG(OffloadDevice, offload_optimizer_device) = OffloadDevice::kNone;
  ACCELERATE_ARG(OffloadDevice, offload_param_device) = OffloadDevice::kNone;
  // Stage 3 only (DeepSpeed's zero.Init: construct the model sharded).
  // Accelerate switches it off below stage 3.
  ACCELERATE_ARG(bool, zero3_init_flag) = false;
  // Stage 3 only: gather 16-bit weights when saving the model.
  ACCELERATE_ARG(bool, zero3_save_16bit_model) = false;
};

}  // namespace accelerate
