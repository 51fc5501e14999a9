// Runs a body over ranges of [0, n) on LibTorch's intra-op threads
// (at::parallel_for), from any source of the library. Internal.
//
// at::parallel_for is a header template: with LibTorch's OpenMP backend
// (Debian's and PyPI's builds) it forks only where the caller is compiled
// with OpenMP, and the library is not (its -fopenmp would reach every
// source). Calling it through here, the one source built with OpenMP,
// makes the library's own kernels use the threads LibTorch's do.
#pragma once

#include <cstdint>
#include <functional>

namespace accelerate::compat {

// body(begin, end) over [0, n) in ranges of at least `grain`, on up to
// at::get_num_threads() threads (at::get_thread_num() tells a body which).
void parallel_ranges(std::int64_t n, std::int64_t grain,
                     const std::function<void(std::int64_t, std::int64_t)>& body);

}  // namespace accelerate::compat
