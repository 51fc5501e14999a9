// Keeps glibc's malloc from handing a training loop's big, short-lived
// blocks back to the kernel after every step.
//
// A forward/backward pass allocates and frees the same multi-megabyte
// activation and gradient buffers every step. With glibc's adaptive defaults
// many of them are mmapped and unmapped, or trimmed off the heap and grown
// back, each time, so every step touches fresh pages: on the seed's MNIST
// model that is ~10,000 page faults per step and 20-50% of the step time
// (docs/performance.md). Fixing both thresholds lets freed blocks be reused.
//
// The Accelerator calls this once when it is constructed from the launcher's
// environment (AcceleratorOptions::tune_malloc, default on). A plain loop can
// call it too.
#pragma once

#include "accelerate/environment.h"

namespace accelerate {

enum class MallocTuningResult {
  kApplied,            // thresholds set (or already set by an earlier call)
  kLeftToEnvironment,  // GLIBC_TUNABLES or MALLOC_*_ variables choose them
  kUnsupported,        // not glibc, or glibc refused the values
};

// Blocks below this come from the heap and are reused (glibc's largest
// allowed mmap threshold on 64-bit systems).
inline constexpr long kTunedMmapThresholdBytes = 32L << 20;
// Free memory at the heap's top is returned to the kernel only above this.
inline constexpr long kTunedTrimThresholdBytes = (1L << 31) - 1;

// Process-wide: sets glibc's M_MMAP_THRESHOLD and M_TRIM_THRESHOLD to the
// values above, unless `env` already sets either threshold (through
// GLIBC_TUNABLES glibc.malloc.* or MALLOC_MMAP_THRESHOLD_ /
// MALLOC_TRIM_THRESHOLD_), which the user's choice then keeps. The cost:
// freed memory below the heap's top 2 GiB stays with the process (its RSS
// does not shrink after a peak), as with any caching allocator.
MallocTuningResult tune_malloc_for_training(const Environment& env = current_environment());

const char* to_string(MallocTuningResult result);

}  // namespace accelerate
