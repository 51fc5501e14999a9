// Compiled with OpenMP where the compiler has it (src/compat/parallel.cmake,
// parallel_ranges.h says why); without it the ranges run on one thread.
#include "compat/parallel_ranges.h"

#include <ATen/Parallel.h>

namespace accelerate::compat {

void parallel_ranges(std::int64_t n, std::int64_t grain,
                     const std::function<void(std::int64_t, std::int64_t)>& body) {
  at::parallel_for(0, n, grain, body);
}

}  // namespace accelerate::compat
