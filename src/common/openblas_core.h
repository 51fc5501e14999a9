// Which of OpenBLAS's kernels run this machine's fp32 matrix products.
//
// OpenBLAS (Debian's LibTorch calls it for every fp32 matrix product) picks
// its kernels when it loads, from the CPU's family and model. A release older
// than the CPU does not know the model and falls back to its generic SSE3
// kernels ("Prescott"), whatever the CPU's vector units: Debian 12's OpenBLAS
// 0.3.21 on a Xeon of family 6, model 207 (AVX-512 with bf16, in a VM) did
// 41 GFLOP/s with them and 204 with its Cooperlake kernels (n = 2048, two
// threads; docs/launching.md, "OpenBLAS kernels"). OpenBLAS reads
// OPENBLAS_CORETYPE only when it loads, so a process cannot switch its own:
// the launcher sets the variable for the processes it starts, and the
// Accelerator of a program started otherwise prints what to export.
//
// Only a pre-AVX fallback on a CPU with AVX2 or more is overruled: a choice
// OpenBLAS made knowingly (its Zen or SkylakeX kernels on those CPUs) stays.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "accelerate/common/environment.h"

namespace accelerate {
namespace detail {

// The OpenBLAS core (an OPENBLAS_CORETYPE value) whose kernels need no more
// than these /proc/cpuinfo flags: Cooperlake (AVX-512 with bf16), SkylakeX
// (AVX-512 F/CD/BW/DQ/VL), Haswell (AVX2 and FMA); nullopt below AVX2.
std::optional<std::string> openblas_core_for_cpu(const std::vector<std::string>& cpu_flags);

// What OPENBLAS_CORETYPE should say when OpenBLAS picked `picked` (its
// openblas_get_corename()) on a CPU with `cpu_flags`: the core of
// openblas_core_for_cpu when `picked` is one of OpenBLAS's pre-AVX cores
// (Prescott, Core2, Nehalem, ...; any case); nullopt otherwise.
std::optional<std::string> faster_openblas_core(const std::string& picked,
                                                const std::vector<std::string>& cpu_flags);

// The core of the OpenBLAS already loaded in this process (the library's
// programs, through LibTorch); nullopt when the process has no OpenBLAS.
std::optional<std::string> openblas_core_in_this_process();

// The core the system's OpenBLAS (libopenblas.so.0) picks here, loading it
// for the question (the launcher links no BLAS); nullopt when there is none.
std::optional<std::string> openblas_core_of_system_library();

// The one-line note for a program started without the launcher whose
// OpenBLAS runs a pre-AVX core on a newer CPU, unless `env` sets
// OPENBLAS_CORETYPE; nullopt when there is nothing to say.
std::optional<std::string> openblas_core_note(const std::optional<std::string>& picked,
                                              const std::vector<std::string>& cpu_flags,
                                              const Environment& env);

}  // namespace detail
}  // namespace accelerate
