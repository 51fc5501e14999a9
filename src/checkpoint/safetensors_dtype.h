// safetensors dtype names <-> LibTorch scalar types, for the dtypes both have.
#pragma once

#include <optional>
#include <string>

#include <c10/core/ScalarType.h>

namespace accelerate::safetensors {

// nullptr when safetensors has no name for `type` (complex, quantized, ...).
inline const char* dtype_name(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Double:
      return "F64";
    case c10::ScalarType::Float:
      return "F32";
    case c10::ScalarType::Half:
      return "F16";
    case c10::ScalarType::BFloat16:
      return "BF16";
    case c10::ScalarType::Long:
      return "I64";
    case c10::ScalarType::Int:
      return "I32";
    case c10::ScalarType::Short:
      return "I16";
    case c10::ScalarType::Char:
      return "I8";
    case c10::ScalarType::Byte:
      return "U8";
    case c10::ScalarType::Bool:
      return "BOOL";
    default:
      return nullptr;
  }
}

// std::nullopt for names LibTorch has no type for (U16, U32, U64, F8_*).
inline std::optional<c10::ScalarType> scalar_type(const std::string& name) {
  static const std::pair<const char*, c10::ScalarType> kTypes[] = {
      {"F64", c10::ScalarType::Double}, {"F32", c10::ScalarType::Float},
      {"F16", c10::ScalarType::Half},   {"BF16", c10::ScalarType::BFloat16},
      {"I64", c10::ScalarType::Long},   {"I32", c10::ScalarType::Int},
      {"I16", c10::ScalarType::Short},  {"I8", c10::ScalarType::Char},
      {"U8", c10::ScalarType::Byte},    {"BOOL", c10::ScalarType::Bool}};
  for (const auto& [text, type] : kTypes) {
    if (name == text) return type;
  }
  return std::nullopt;
}

}  // namespace accelerate::safetensors
