#include "common/bf16_hardware.h"

#include <algorithm>

namespace accelerate {
namespace detail {
namespace {

bool has(const std::vector<std::string>& flags, const char* flag) {
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

}  // namespace

std::vector<std::string> bf16_instructions(const std::vector<std::string>& cpu_flags) {
  std::vector<std::string> found;
  for (const char* flag : {"avx512_bf16", "amx_bf16", "avx_ne_convert", "bf16"}) {
    if (has(cpu_flags, flag)) found.emplace_back(flag);
  }
  return found;
}

std::optional<std::string> bf16_emulation_note(const std::vector<std::string>& cpu_flags) {
  if (!bf16_instructions(cpu_flags).empty()) return std::nullopt;
  // x86-64 always lists sse2; Arm's Features always list fp (asimd with it).
  std::string missing;
  if (has(cpu_flags, "sse2")) {
    missing = "avx512_bf16 or amx_bf16";
  } else if (has(cpu_flags, "asimd")) {
    missing = "bf16";
  } else {
    return std::nullopt;
  }
  return "this CPU has no bf16 instructions (no " + missing +
         "): LibTorch emulates bf16 matrix products, and bf16 autocast trains several times "
         "slower than fp32 here (about 10x for the GPT example on an AVX2 CPU; "
         "docs/mixed-precision.md, \"bf16 without bf16 hardware\"); mixed_precision 'no' is "
         "faster on this machine";
}

}  // namespace detail
}  // namespace accelerate
