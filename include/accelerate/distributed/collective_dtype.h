// CollectiveDtype: the floating-point types gradients and parameters may
// travel in between processes (FSDP's MixedPrecision param_dtype /
// reduce_dtype, DeepSpeed's communication_data_type). LibTorch-free, so the
// config readers and the command line share it; the library maps it to
// at::ScalarType where the collectives run (docs/sharding.md, "Low-precision
// collectives").
#pragma once

#include <optional>
#include <string_view>

#include "accelerate/detail/enum_names.h"

namespace accelerate {

enum class CollectiveDtype {
  kFp32,  // the tensors' own dtype (fp32 training): nothing rounded
  kFp16,  // half the bytes of fp32; values beyond ±65504 become inf
  kBf16,  // half the bytes of fp32; fp32's range, 8 significant bits
};

// Spelled as DeepSpeed spells communication_data_type, with PyTorch's dtype
// names as aliases; read in any case (DeepSpeed lower-cases the value).
namespace detail {
inline constexpr EnumName<CollectiveDtype> kCollectiveDtypeNames[] = {
    {CollectiveDtype::kFp32, "fp32", {"float32"}},
    {CollectiveDtype::kFp16, "fp16", {"float16"}},
    {CollectiveDtype::kBf16, "bf16", {"bfloat16"}}};
static_assert(names_are_distinct(kCollectiveDtypeNames));
}  // namespace detail

inline const char* to_string(CollectiveDtype dtype) {
  return detail::enum_name(detail::kCollectiveDtypeNames, dtype, "?");
}

inline std::optional<CollectiveDtype> parse_collective_dtype(std::string_view text) {
  return detail::parse_enum(detail::kCollectiveDtypeNames, text, detail::NameCase::kAnyCase);
}

}  // namespace accelerate
