#include "accelerate/common/distributed_type.h"

#include "accelerate/detail/enum_names.h"

namespace accelerate {
namespace {

constexpr detail::EnumName<DistributedType> kDistributedTypeNames[] = {
    {DistributedType::kNo, "NO"},
    {DistributedType::kMultiCpu, "MULTI_CPU"},
    {DistributedType::kMultiGpu, "MULTI_GPU"},
    {DistributedType::kDeepSpeed, "DEEPSPEED"},
    {DistributedType::kFsdp, "FSDP"}};
static_assert(detail::names_are_distinct(kDistributedTypeNames));

}  // namespace

const char* to_string(DistributedType type) {
  return detail::enum_name(kDistributedTypeNames, type, "?");
}

std::optional<DistributedType> parse_distributed_type(std::string_view text) {
  return detail::parse_enum(kDistributedTypeNames, text, detail::NameCase::kExact);
}

}  // namespace accelerate
