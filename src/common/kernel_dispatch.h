// One copy of a kernel's loops per CpuCapability, and the call that runs the
// copy kernel_capability() names (accelerate/common/cpu_capability.h).
//
//   void gelu_forward(const float* x, float* y, int64_t n) {
//     run_dispatched([&]() ACCELERATE_KERNEL_BODY { gelu_rows(x, y, n); });
//   }
//
// The body is forced inline into three function templates, each compiled
// for one instruction set, so GCC vectorizes the same loops three times; the
// loops themselves must be inline too (ACCELERATE_ALWAYS_INLINE). This
// replaces GCC's target_clones, whose loader-time choice by the CPU alone
// could not be capped. LibTorch-free.
#pragma once

#include "accelerate/common/cpu_capability.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ACCELERATE_KERNEL_COPIES 1
#else
#define ACCELERATE_KERNEL_COPIES 0
#endif

#define ACCELERATE_KERNEL_BODY __attribute__((always_inline))

namespace accelerate {
namespace detail {

#if ACCELERATE_KERNEL_COPIES
template <class Body>
__attribute__((target("arch=x86-64-v4"))) void run_for_avx512(const Body& body) {
  body();
}
template <class Body>
__attribute__((target("arch=x86-64-v3"))) void run_for_avx2(const Body& body) {
  body();
}
#endif
template <class Body>
void run_for_default(const Body& body) {
  body();
}

template <class Body>
void run_dispatched(const Body& body) {
#if ACCELERATE_KERNEL_COPIES
  switch (kernel_capability()) {
    case CpuCapability::kAvx512:
      return run_for_avx512(body);
    case CpuCapability::kAvx2:
      return run_for_avx2(body);
    case CpuCapability::kDefault:
      break;
  }
#endif
  run_for_default(body);
}

}  // namespace detail
}  // namespace accelerate
