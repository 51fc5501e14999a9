#include "accelerate/distributed_type.h"

namespace accelerate {

const char* to_string(DistributedType type) {
  switch (type) {
    case DistributedType::kNo: return "NO";
    case DistributedType::kMultiCpu: return "MULTI_CPU";
    case DistributedType::kMultiGpu: return "MULTI_GPU";
    case DistributedType::kDeepSpeed: return "DEEPSPEED";
    case DistributedType::kFsdp: return "FSDP";
  }
  return "?";
}

std::optional<DistributedType> parse_distributed_type(std::string_view text) {
  for (DistributedType type : {DistributedType::kNo, DistributedType::kMultiCpu, DistributedType::kMultiGpu,
                               DistributedType::kDeepSpeed, DistributedType::kFsdp}) {
    if (text == to_string(type)) return type;
  }
  return std::nullopt;
}

}  // namespace accelerate
