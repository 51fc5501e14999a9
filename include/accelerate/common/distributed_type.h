// DistributedType: how a job spreads its training over processes, as
// Accelerate's `DistributedType` names it (Accelerator::distributed_type()).
// LibTorch-free, like MixedPrecision: the launcher and the library share it.
#pragma once

#include <optional>
#include <string_view>

namespace accelerate {

enum class DistributedType {
  kNo,         // one process
  kMultiCpu,   // data parallelism over CPU processes
  kMultiGpu,   // data parallelism over GPU processes
  kDeepSpeed,  // ZeRO stages 0-3, set up as DeepSpeed's settings
  kFsdp,       // ZeRO stages 2-3, set up as FSDP's settings
};

// Accelerate's spelling: "NO", "MULTI_CPU", "MULTI_GPU", "DEEPSPEED", "FSDP".
const char* to_string(DistributedType type);

// The value spelled `text` exactly (as to_string writes it), or nullopt.
std::optional<DistributedType> parse_distributed_type(std::string_view text);

}  // namespace accelerate
