// Row loops of the RMS norm (transformers' LlamaRMSNorm), forward and
// backward, over contiguous rows of `width` float or bfloat16 values
// (bfloat16 as its raw 16 bits), built like gelu_kernels.h says. Math in
// float; bfloat16 rounded to nearest even where LibTorch's composite rounds:
//   r  = 1 / sqrt(sum_j x_j^2 / width + eps)          (kept per row, float)
//   n_j = x_j r, rounded to x's type;  y_j = w_j n_j, rounded
//   backward, for the upstream gradient g:
//   dn_j = g_j w_j;  dx_j = r (dn_j - (x_j r) sum_k dn_k x_k r / width)
//   dw_j += g_j n_j   (into a float row the caller sums over threads)
#pragma once

#include <cstdint>

namespace accelerate {
namespace detail {

void rms_norm_forward(const float* x, const float* w, float* y, float* rstd, int64_t rows,
                      int64_t width, float eps);
void rms_norm_forward(const uint16_t* x, const uint16_t* w, uint16_t* y, float* rstd, int64_t rows,
                      int64_t width, float eps);
void rms_norm_backward(const float* grad, const float* x, const float* w, const float* rstd,
                       float* dx, float* dw_sum, int64_t rows, int64_t width);
void rms_norm_backward(const uint16_t* grad, const uint16_t* x, const uint16_t* w,
                       const float* rstd, uint16_t* dx, float* dw_sum, int64_t rows, int64_t width);

}  // namespace detail
}  // namespace accelerate
