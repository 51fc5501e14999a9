#include "accelerate/mixed_precision.h"

namespace accelerate {

const char* to_string(MixedPrecision precision) {
  switch (precision) {
    case MixedPrecision::kNo: return "no";
    case MixedPrecision::kBF16: return "bf16";
    case MixedPrecision::kFP16: return "fp16";
  }
  return "?";
}

std::optional<MixedPrecision> parse_mixed_precision(std::string_view text) {
  for (MixedPrecision precision : kAllMixedPrecisions) {
    if (text == to_string(precision)) return precision;
  }
  return std::nullopt;
}

}  // namespace accelerate
