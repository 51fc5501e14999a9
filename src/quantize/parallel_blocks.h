// Runs a body over ranges of blocks on LibTorch's intra-op threads
// (at::parallel_for). Internal.
#pragma once

#include <cstdint>
#include <functional>

namespace accelerate::quantize {

// body(begin, end) over [0, blocks) in ranges of at least `grain` blocks, on
// up to at::get_num_threads() threads.
void for_block_ranges(std::int64_t blocks, std::int64_t grain,
                      const std::function<void(std::int64_t, std::int64_t)>& body);

}  // namespace accelerate::quantize
