// Row loops of attention's causal softmax over contiguous scores
// [matrices, queries, keys] (float, or bfloat16 as its raw 16 bits): query i
// sees keys j <= i + offset (offset = keys - queries), and
//   p[i, j] = exp(scale s[i, j] - m) / sum over seen keys   (0 for unseen keys)
// in float, written in the scores' type; backward
//   ds[i, j] = scale p[i, j] (dp[i, j] - sum_k dp[i, k] p[i, k]).
// Built per x86 instruction set like gelu_kernels.h.
#pragma once

#include <cstdint>

namespace accelerate {
namespace detail {

struct CausalRows {
  int64_t rows;     // matrices x queries
  int64_t queries;  // rows per matrix
  int64_t keys;     // row length
  int64_t offset;   // query i sees keys [0, i + offset]
  float scale;      // > 0
};

void causal_softmax_forward(const float* scores, float* probs, CausalRows shape);
void causal_softmax_forward(const uint16_t* scores, uint16_t* probs, CausalRows shape);
void causal_softmax_backward(const float* probs, const float* grad, float* grad_scores,
                             CausalRows shape);
void causal_softmax_backward(const uint16_t* probs, const uint16_t* grad, uint16_t* grad_scores,
                             CausalRows shape);

}  // namespace detail
}  // namespace accelerate
