// How kernel_capability() (accelerate/common/cpu_capability.h) is decided: pure
// functions of the CPU's flags and the environment, so tests hand in any CPU.
// LibTorch-free.
#pragma once

#include <string>
#include <vector>

#include "accelerate/common/cpu_capability.h"
#include "accelerate/common/environment.h"

namespace accelerate {
namespace detail {

// The /proc/cpuinfo flags a capability needs beyond the one below it: GCC's
// x86-64-v3 and x86-64-v4 levels, which the kernels' copies are compiled for
// (abm is how Linux names LZCNT).
const std::vector<std::string>& flags_added_by(CpuCapability capability);

// The highest capability whose flags (and those below it) are all among
// `cpu_flags`; kDefault for a CPU that is not x86.
CpuCapability highest_cpu_capability(const std::vector<std::string>& cpu_flags);

// ACCELERATE_CPU_CAPABILITY's value in `env` against `cpu_flags`: the
// highest capability when unset; ConfigError (one line) for a value that is
// not a capability (listing them) or one above this CPU (naming a missing
// flag).
CpuCapability resolve_cpu_capability(const Environment& env,
                                     const std::vector<std::string>& cpu_flags);

}  // namespace detail
}  // namespace accelerate
