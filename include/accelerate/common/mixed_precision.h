// MixedPrecision: the precision a job computes in, as Accelerate's
// `mixed_precision` setting ("no", "bf16", "fp16"). LibTorch-free, so the
// command line, the config file and the library share one closed set; the
// strings exist only where users write them (flags, config files, the
// ACCELERATE_MIXED_PRECISION variable).
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace accelerate {

enum class MixedPrecision {
  kNo,    // fp32 everywhere
  kBF16,  // bf16 autocast (CPU and CUDA); fp32 weights and gradients
  kFP16,  // fp16 autocast with dynamic loss scaling (CUDA only)
};

// Every value, in the order Accelerate lists them: no, fp16, bf16.
constexpr std::array<MixedPrecision, 3> kAllMixedPrecisions = {
    MixedPrecision::kNo, MixedPrecision::kFP16, MixedPrecision::kBF16};

// "no", "bf16" or "fp16".
const char* to_string(MixedPrecision precision);

// The value Accelerate spells `text` ("no", "bf16", "fp16"; exact, lower
// case), or nullopt.
std::optional<MixedPrecision> parse_mixed_precision(std::string_view text);

}  // namespace accelerate
