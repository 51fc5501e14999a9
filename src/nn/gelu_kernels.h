// Element loops of the tanh-approximated GELU, forward and backward, over
// contiguous float or bfloat16 spans (bfloat16 as its raw 16 bits). Each is
// built for several x86 instruction sets and runs the copy kernel_capability()
// names (common/kernel_dispatch.h), so the library itself can stay built for
// the baseline.
//
// Math in float, bfloat16 rounded to nearest even on store, as LibTorch does:
//   y  = x / (1 + exp(-2u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//      = 0.5 x (1 + tanh u)
//   dx = g (0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)), t = tanh u
#pragma once

#include <cstdint>

namespace accelerate {
namespace detail {

void gelu_tanh_forward(const float* x, float* y, int64_t n);
void gelu_tanh_forward(const uint16_t* x, uint16_t* y, int64_t n);
void gelu_tanh_backward(const float* grad, const float* x, float* dx, int64_t n);
void gelu_tanh_backward(const uint16_t* grad, const uint16_t* x, uint16_t* dx, int64_t n);

}  // namespace detail
}  // namespace accelerate
