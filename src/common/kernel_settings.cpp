// The settings that choose which machine code runs the products and the
// library's kernels: OpenBLAS's core (read by OpenBLAS when it loads;
// common/openblas_core.h) and the library's own cap
// (accelerate/common/cpu_capability.h).
#include <algorithm>
#include <cctype>

#include "accelerate/common/cpu_capability.h"
#include "common/settings.h"

namespace accelerate::settings {
namespace {

// An OpenBLAS core name: letters and digits ("Haswell", "SkylakeX"; OpenBLAS
// matches them in any case and ignores names it does not know).
std::optional<std::string> parse_core_name(std::string_view text) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) != 0;
      })) {
    return std::nullopt;
  }
  return std::string(text);
}

std::string format_cpu_capability(const CpuCapability& value) { return to_string(value); }

}  // namespace

const Setting<std::string> kOpenblasCoretype{
    {"OPENBLAS_CORETYPE", "", "an OpenBLAS core name (Haswell, SkylakeX, Cooperlake, ...)",
     "OpenBLAS's own choice (the launcher's where that is a generic core)",
     "which of OpenBLAS's kernels run fp32 matrix products"},
    "",
    parse_core_name,
    format_text};

const Setting<CpuCapability> kCpuCapability{
    {"ACCELERATE_CPU_CAPABILITY", "", "one of default, avx2, avx512", "the highest this CPU has",
     "caps the instruction set of the library's own CPU kernels, as ATEN_CPU_CAPABILITY caps "
     "LibTorch's"},
    CpuCapability::kAvx512,
    parse_cpu_capability,
    format_cpu_capability};

}  // namespace accelerate::settings
