// Row loops of the softmax cross-entropy over contiguous [rows, classes]
// logits (float, or bfloat16 as its raw 16 bits), in float: one pass for
// the row maximum, one for the sum of exponentials, nothing written but a
// float per row; the backward pass writes the gradient in the logits' type.
// Built per x86 instruction set like gelu_kernels.h.
#pragma once

#include <cstdint>

namespace accelerate {
namespace detail {

// For rows [0, rows): lse[r] = log sum_j exp(x[r, j]) and loss[r] =
// lse[r] - x[r, targets[r]], with loss[r] = 0 where targets[r] == ignore_index.
// Targets must be in [0, classes) or ignore_index (checked by the caller).
void cross_entropy_forward(const float* logits, int64_t rows, int64_t classes,
                           const int64_t* targets, int64_t ignore_index, float* lse, float* loss);
void cross_entropy_forward(const uint16_t* logits, int64_t rows, int64_t classes,
                           const int64_t* targets, int64_t ignore_index, float* lse, float* loss);

// grad[r, j] = row_scale[r] (exp(x[r, j] - lse[r]) - [j == targets[r]]),
// and 0 for the whole row where targets[r] == ignore_index.
void cross_entropy_backward(const float* logits, int64_t rows, int64_t classes,
                            const int64_t* targets, int64_t ignore_index, const float* lse,
                            const float* row_scale, float* grad);
void cross_entropy_backward(const uint16_t* logits, int64_t rows, int64_t classes,
                            const int64_t* targets, int64_t ignore_index, const float* lse,
                            const float* row_scale, uint16_t* grad);

}  // namespace detail
}  // namespace accelerate
