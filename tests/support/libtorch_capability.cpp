// Linked into the kernel test binaries that CTest also runs capped
// (accelerate_add_capped_tests, tests/CMakeLists.txt). ATen sends bf16
// matrix products to oneDNN when the CPU has AVX-512 BW/VL/DQ, whatever
// ATEN_CPU_CAPABILITY says, and LibTorch 1.13's oneDNN capped to AVX2 then
// refuses them ("could not create a primitive descriptor iterator") where a
// real AVX2 CPU would take ATen's own gemm. Under a cap below avx512 this
// turns ATen's oneDNN route off before any test runs, so the products take
// the path they take on such a CPU (on LibTorch 1.13 its bf16 gemm
// accumulates in bf16: docs/kernels.md, "Every path on every machine").
#include <ATen/Context.h>

#include <cstdlib>
#include <string>

namespace {

bool libtorch_capped_below_avx512() {
  const char* cap = std::getenv("ATEN_CPU_CAPABILITY");
  const std::string value = cap == nullptr ? "" : cap;
  return value == "avx2" || value == "default";
}

const bool kOneDnnRouteMatchesTheCap = [] {
  if (libtorch_capped_below_avx512()) at::globalContext().setUserEnabledMkldnn(false);
  return true;
}();

}  // namespace
