// Element loops of silu(gate) * up (the gated MLP of Llama-family models),
// forward and backward, over contiguous float or bfloat16 spans (bfloat16
// as its raw 16 bits), built like gelu_kernels.h says. Math in float, with
// s = sigmoid(a) computed from exp(-|a|) (no overflow on either side);
// bfloat16 rounded to nearest even where the composite at::silu(a) * b
// rounds (silu(a) before the product):
//   y  = silu(a) b,  silu(a) = a s
//   da = g b s (1 + a (1 - s)),  db = g silu(a)
#pragma once

#include <cstdint>

namespace accelerate {
namespace detail {

void silu_mul_forward(const float* a, const float* b, float* y, int64_t n);
void silu_mul_forward(const uint16_t* a, const uint16_t* b, uint16_t* y, int64_t n);
void silu_mul_backward(const float* grad, const float* a, const float* b, float* da, float* db,
                       int64_t n);
void silu_mul_backward(const uint16_t* grad, const uint16_t* a, const uint16_t* b, uint16_t* da,
                       uint16_t* db, int64_t n);

}  // namespace detail
}  // namespace accelerate
