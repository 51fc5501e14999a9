// Whether this CPU computes bf16 in hardware. Without it (AMD EPYC up to
// Zen 3, Intel before Cooper Lake: AVX2 or AVX-512 without avx512_bf16)
// LibTorch emulates bf16 matrix products, and bf16 autocast trains several
// times slower than fp32 (docs/mixed-precision.md, "bf16 without bf16
// hardware"): `accelerate env` says so, and the Accelerator notes it once
// when bf16 autocast is asked for on such a CPU.
//
// LibTorch-free (the command line links it); the flags come from
// /proc/cpuinfo (common/cpu_info.h), so tests hand in any CPU.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace accelerate {
namespace detail {

// The CPU's bf16 instructions among `cpu_flags` (x86: avx512_bf16,
// amx_bf16, avx_ne_convert; Arm: bf16), in that order.
std::vector<std::string> bf16_instructions(const std::vector<std::string>& cpu_flags);

// The note for bf16 autocast on a CPU whose flags name none of them; nullopt
// when it has one, or when the flags are of no CPU family we know (nothing
// can be said then).
std::optional<std::string> bf16_emulation_note(const std::vector<std::string>& cpu_flags);

}  // namespace detail
}  // namespace accelerate
