// The query blocks and the thread split shared by the blocked causal
// attention's two forms (blocked_causal_attention.cpp on LibTorch's
// products, float_causal_attention.cpp on the library's own). Internal.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <torch/csrc/autograd/custom_function.h>

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

// What either form keeps for backward: q, k, v (as the form reads them),
// each block's probabilities, the scale and the blocks.
struct SavedBlocks {
  at::Tensor q, k, v;
  std::vector<at::Tensor> probs;
  double scale;
  std::vector<QueryBlock> blocks;
};

inline void save_blocks(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                        const at::Tensor& k, const at::Tensor& v,
                        const std::vector<at::Tensor>& probs, double scale, int64_t query_block) {
  torch::autograd::variable_list saved = {q, k, v};
  saved.insert(saved.end(), probs.begin(), probs.end());
  ctx->save_for_backward(saved);
  ctx->saved_data["scale"] = scale;
  ctx->saved_data["query_block"] = query_block;
}

// token_dim: q's dimension of tokens (1 or 2, as the form saves it).
inline SavedBlocks saved_blocks(torch::autograd::AutogradContext* ctx, int64_t token_dim) {
  const torch::autograd::variable_list saved = ctx->get_saved_variables();
  return {saved[0],
          saved[1],
          saved[2],
          std::vector<at::Tensor>(saved.begin() + 3, saved.end()),
          ctx->saved_data["scale"].toDouble(),
          query_blocks(saved[0].size(token_dim), ctx->saved_data["query_block"].toInt())};
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
