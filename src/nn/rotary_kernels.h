// Row loops of rotary position embeddings (rotate_half layout), forward and
// backward, built like gelu_kernels.h says. `rows` consecutive rows of
// heads x dim values (float, or bfloat16 as its raw 16 bits), starting at
// row `first` of a [batch x tokens] sequence: row r holds token r % tokens,
// whose cos and sin rows (dim values each) it uses. Math in float, rounded
// once on store. With h = dim / 2, for each head's values x:
//   y_j     = x_j c_j - x_{j+h} s_j          y_{j+h} = x_{j+h} c_{j+h} + x_j s_{j+h}
//   dx_j    = g_j c_j + g_{j+h} s_{j+h}      dx_{j+h} = g_{j+h} c_{j+h} - g_j s_j
#pragma once

#include <cstdint>

namespace accelerate {
namespace detail {

void rotary_forward(const float* x, const float* cos, const float* sin, float* y, int64_t first,
                    int64_t rows, int64_t tokens, int64_t heads, int64_t dim);
void rotary_forward(const uint16_t* x, const uint16_t* cos, const uint16_t* sin, uint16_t* y,
                    int64_t first, int64_t rows, int64_t tokens, int64_t heads, int64_t dim);
void rotary_backward(const float* grad, const float* cos, const float* sin, float* dx,
                     int64_t first, int64_t rows, int64_t tokens, int64_t heads, int64_t dim);
void rotary_backward(const uint16_t* grad, const uint16_t* cos, const uint16_t* sin, uint16_t* dx,
                     int64_t first, int64_t rows, int64_t tokens, int64_t heads, int64_t dim);

}  // namespace detail
}  // namespace accelerate
