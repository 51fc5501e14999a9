#include "accelerate/common/backend.h"

#include "accelerate/detail/enum_names.h"

namespace accelerate {

const char* to_string(Backend backend) {
  static constexpr detail::EnumName<Backend> kBackendNames[] = {
      {Backend::kNone, "none"}, {Backend::kGloo, "gloo"}, {Backend::kNccl, "nccl"}};
  static_assert(detail::names_are_distinct(kBackendNames));
  return detail::enum_name(kBackendNames, backend, "?");
}

}  // namespace accelerate
