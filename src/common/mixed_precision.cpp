#include "accelerate/common/mixed_precision.h"

#include "accelerate/detail/enum_names.h"

namespace accelerate {
namespace {

// In kAllMixedPrecisions' order (Accelerate's), which the assert holds.
constexpr detail::EnumName<MixedPrecision> kMixedPrecisionNames[] = {
    {MixedPrecision::kNo, "no"}, {MixedPrecision::kFP16, "fp16"}, {MixedPrecision::kBF16, "bf16"}};
static_assert(detail::names_are_distinct(kMixedPrecisionNames));
static_assert(detail::same_values(kMixedPrecisionNames, kAllMixedPrecisions));

}  // namespace

const char* to_string(MixedPrecision precision) {
  return detail::enum_name(kMixedPrecisionNames, precision, "?");
}

std::optional<MixedPrecision> parse_mixed_precision(std::string_view text) {
  return detail::parse_enum(kMixedPrecisionNames, text, detail::NameCase::kExact);
}

}  // namespace accelerate
