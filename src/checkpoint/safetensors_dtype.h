// safetensors dtype names <-> LibTorch scalar types, for the dtypes both have.
#pragma once

#include <optional>
#include <string>

#include <c10/core/ScalarType.h>

#include "accelerate/detail/enum_names.h"

namespace accelerate::safetensors {

// The dtypes both have, each name written once (names LibTorch has no type
// for, U16, U32, U64, F8_*, are not here).
inline constexpr detail::EnumName<c10::ScalarType> kDtypeNames[] = {
    {c10::ScalarType::Double, "F64"}, {c10::ScalarType::Float, "F32"},
    {c10::ScalarType::Half, "F16"},   {c10::ScalarType::BFloat16, "BF16"},
    {c10::ScalarType::Long, "I64"},   {c10::ScalarType::Int, "I32"},
    {c10::ScalarType::Short, "I16"},  {c10::ScalarType::Char, "I8"},
    {c10::ScalarType::Byte, "U8"},    {c10::ScalarType::Bool, "BOOL"}};
static_assert(detail::names_are_distinct(kDtypeNames));

// nullptr when safetensors has no name for `type` (complex, quantized, ...).
inline const char* dtype_name(c10::ScalarType type) {
  return detail::enum_name(kDtypeNames, type, nullptr);
}

// std::nullopt for names LibTorch has no type for.
inline std::optional<c10::ScalarType> scalar_type(const std::string& name) {
  return detail::parse_enum(kDtypeNames, name, detail::NameCase::kExact);
}

}  // namespace accelerate::safetensors
