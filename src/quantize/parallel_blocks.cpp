// at::parallel_for is a header template: with LibTorch's OpenMP backend
// (Debian's and PyPI's builds) its `#pragma omp parallel` only forks where
// the caller is compiled with OpenMP, so this one source is
// (src/quantize/sources.cmake); compiled without it, the loop runs on one
// thread whatever at::set_num_threads says.
#include "quantize/parallel_blocks.h"

#include <ATen/Parallel.h>

namespace accelerate::quantize {

void for_block_ranges(std::int64_t blocks, std::int64_t grain,
                      const std::function<void(std::int64_t, std::int64_t)>& body) {
  at::parallel_for(0, blocks, grain, body);
}

}  // namespace accelerate::quantize
