// Accelerate's DeepSpeedPlugin: sharded data parallelism (ZeRO) for the
// models and optimizers an Accelerator prepares. accelerate-cpp runs ZeRO
// itself, on the same collectives as data parallelism (no DeepSpeed
// library); docs/sharding.md says what each stage shards, what it costs and
// where it differs from DeepSpeed.
//
//   Accelerator
//   accelerator(AcceleratorOptions().deepspeed_plugin(DeepSpeedPlugin().zero_stage(2)));
//   accelerator.prepare(model, optimizer, loader);  // the model before its optimizer
#pragma once

#include "accelerate/arg.h"

namespace accelerate {

struct DeepSpeedPlugin {
  // 0: data parallelism (every process keeps everything). 1: each process
  // keeps the optimizer state of its shard of the parameters only. 2: and
  // only its shard of the averaged gradients. Stage 3 (parameters sharded
  // too) is not available yet: ConfigError. Accelerate's default is 2.
  ACCELERATE_ARG(int, zero_stage) = 2;
};

}  // namespace accelerate
