// Keeps glibc's malloc from handing a training loop's big, short-lived
// blocks back to the kernel after every step.
//
// A forward/backward pass allocates and frees the same multi-megabyte
// activation and gradient buffers every step. With glibc's adaptive defaults
// many of them are mmapped and unmapped, or trimmed off the heap and grown
// back, each time, so every step touches fresh pages: on the seed's MNIST
// model that is ~10,000 page faults per step and 20-50% of the step time
// (docs/performance.md). Fixing both thresholds lets freed blocks be reused,
// and no mmapped blocks at all keeps those above the largest threshold
// (32 MiB: a GPT's logits and their gradient, 134 MB each at 4096 tokens and
// a vocabulary of 8192) from being mapped afresh, page by page, every step.
//
// The Accelerator calls this once when it is constructed from the launcher's
// environment (AcceleratorOptions::tune_malloc, default on). A plain loop can
// call it too.
#pragma once

#include "accelerate/common/environment.h"

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
// How many blocks glibc may mmap on their own: none, so larger blocks come
// from the heap as well. (Where the heap cannot grow, glibc still maps
// memory for it; a thread's arena hands a block too large for it to the
// main heap.)
inline constexpr int kTunedMmapMax = 0;

// Process-wide: sets glibc's M_MMAP_THRESHOLD, M_TRIM_THRESHOLD and
// M_MMAP_MAX to the values above, unless `env` already sets one of them
// (through GLIBC_TUNABLES glibc.malloc.* or MALLOC_MMAP_THRESHOLD_ /
// MALLOC_TRIM_THRESHOLD_ / MALLOC_MMAP_MAX_), which the user's choice then
// keeps. The cost:
// freed memory below the heap's top 2 GiB stays with the process (its RSS
// does not shrink after a peak), as with any caching allocator.
MallocTuningResult tune_malloc_for_training(const Environment& env = current_environment());

const char* to_string(MallocTuningResult result);

}  // namespace accelerate
