// The query blocks and the thread split shared by the blocked causal
// attention's two forms (blocked_causal_attention.cpp on LibTorch's
// products, float_causal_attention.cpp on the library's own). Internal.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "compat/parallel_ranges.h"

namespace accelerate {
namespace detail {

// Queries [first, first + rows), which see the keys [0, seen()).
struct QueryBlock {
  int64_t first, rows;
  int64_t seen() const { return first + rows; }
};

inline std::vector<QueryBlock> query_blocks(int64_t tokens, int64_t query_block) {
  std::vector<QueryBlock> blocks;
  for (int64_t first = 0; first < tokens; first += query_block) {
    blocks.push_back({first, std::min(query_block, tokens - first)});
  }
  return blocks;
}

// Each block's probabilities, [matrices, rows, seen], kept for backward.
inline std::vector<at::Tensor> block_probabilities(int64_t matrices,
                                                   const std::vector<QueryBlock>& blocks,
                                                   const at::TensorOptions& options) {
  std::vector<at::Tensor> probs;
  for (const QueryBlock& block : blocks) {
    probs.push_back(at::empty({matrices, block.rows, block.seen()}, options));
  }
  return probs;
}

// Runs fn(begin, end) over [0, matrices) on LibTorch's intra-op threads, one
// range per thread (the matrices are independent; splitting each block's
// small products over threads was slower). The caller's thread-local state
// (grad mode, autocast) holds in every range.
template <typename Fn>
void for_matrix_ranges(int64_t matrices, const Fn& fn) {
  const int64_t threads = at::get_num_threads();
  if (threads <= 1 || matrices < 2) return fn(0, matrices);
  const at::ThreadLocalState state;
  compat::parallel_ranges(matrices, (matrices + threads - 1) / threads,
                          [&](int64_t begin, int64_t end) {
                            at::ThreadLocalStateGuard guard(state);
                            fn(begin, end);
                          });
}

}  // namespace detail
}  // namespace accelerate
