// CpuCapability: the x86 instruction set the library's own CPU kernels run
// with (attention's float products and causal softmax, GELU, SiLU, RMSNorm,
// rotary embeddings, cross-entropy, FusedAdamW's step, ZeRO++'s block
// quantizer).
//
// Each kernel is compiled once per capability, and every call runs the copy
// of the highest capability this CPU has, unless ACCELERATE_CPU_CAPABILITY
// caps it, as ATEN_CPU_CAPABILITY caps LibTorch's own kernels. The cap makes
// a machine run the paths of a smaller CPU (an AVX-512 Xeon those of an AVX2
// EPYC), so that every path is tested on every machine (docs/kernels.md,
// "Every path on every machine"). LibTorch-free.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace accelerate {

enum class CpuCapability {
  kDefault,  // x86-64 baseline (SSE2), and every CPU that is not x86
  kAvx2,     // x86-64-v3: AVX2, FMA, BMI1/2, F16C
  kAvx512,   // x86-64-v4: v3 with AVX-512 F, BW, CD, DQ, VL
};

// Lowest first.
constexpr std::array<CpuCapability, 3> kAllCpuCapabilities = {
    CpuCapability::kDefault, CpuCapability::kAvx2, CpuCapability::kAvx512};

// "default", "avx2" or "avx512": ATEN_CPU_CAPABILITY's words.
const char* to_string(CpuCapability capability);

// The capability `text` names (exact, lower case), or nullopt.
std::optional<CpuCapability> parse_cpu_capability(std::string_view text);

// The capability this process's kernels run: the highest this CPU has
// (/proc/cpuinfo's flags), or ACCELERATE_CPU_CAPABILITY's lower one. Fixed at
// the first call (the Accelerator makes it when it is built); a bad value of
// the variable, or one above this CPU, throws ConfigError at every call.
CpuCapability kernel_capability();

}  // namespace accelerate
