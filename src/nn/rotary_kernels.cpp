#include "rotary_kernels.h"

#include "common/kernel_dispatch.h"
#include "nn/vector_math.h"

namespace accelerate {
namespace detail {
namespace {

using vector_math::load;
using vector_math::store;

// One head's values: the two halves as separate unit-stride arrays whose
// __restrict__ (kept through inlining) lets the loop vectorize. Forward and
// backward differ in the sine's sign and which half's sines they read.
template <typename T, bool kBackward>
ACCELERATE_ALWAYS_INLINE void rotate_head(const T* __restrict__ x_lo, const T* __restrict__ x_hi,
                                          const T* __restrict__ c_lo, const T* __restrict__ c_hi,
                                          const T* __restrict__ s_lo, const T* __restrict__ s_hi,
                                          T* __restrict__ y_lo, T* __restrict__ y_hi,
                                          int64_t half) {
  for (int64_t j = 0; j < half; ++j) {
    const float lo = load(x_lo[j]), hi = load(x_hi[j]);
    if (kBackward) {
      store(lo * load(c_lo[j]) + hi * load(s_hi[j]), y_lo + j);
      store(hi * load(c_hi[j]) - lo * load(s_lo[j]), y_hi + j);
    } else {
      store(lo * load(c_lo[j]) - hi * load(s_lo[j]), y_lo + j);
      store(hi * load(c_hi[j]) + lo * load(s_hi[j]), y_hi + j);
    }
  }
}

template <typename T, bool kBackward>
ACCELERATE_ALWAYS_INLINE void rotate_rows(const T* in, const T* cos, const T* sin, T* out,
                                          int64_t first, int64_t rows, int64_t tokens,
                                          int64_t heads, int64_t dim) {
  const int64_t half = dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t token = (first + r) % tokens;
    const T* c = cos + token * dim;
    const T* s = sin + token * dim;
    for (int64_t head = 0; head < heads; ++head) {
      const T* x = in + (r * heads + head) * dim;
      T* y = out + (r * heads + head) * dim;
      rotate_head<T, kBackward>(x, x + half, c, c + half, s, s + half, y, y + half, half);
    }
  }
}

}  // namespace

void rotary_forward(const float* x, const float* cos, const float* sin, float* y, int64_t first,
                    int64_t rows, int64_t tokens, int64_t heads, int64_t dim) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY {
    rotate_rows<float, false>(x, cos, sin, y, first, rows, tokens, heads, dim);
  });
}

void rotary_forward(const uint16_t* x, const uint16_t* cos, const uint16_t* sin, uint16_t* y,
                    int64_t first, int64_t rows, int64_t tokens, int64_t heads, int64_t dim) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY {
    rotate_rows<uint16_t, false>(x, cos, sin, y, first, rows, tokens, heads, dim);
  });
}

void rotary_backward(const float* grad, const float* cos, const float* sin, float* dx,
                     int64_t first, int64_t rows, int64_t tokens, int64_t heads, int64_t dim) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY {
    rotate_rows<float, true>(grad, cos, sin, dx, first, rows, tokens, heads, dim);
  });
}

void rotary_backward(const uint16_t* grad, const uint16_t* cos, const uint16_t* sin, uint16_t* dx,
                     int64_t first, int64_t rows, int64_t tokens, int64_t heads, int64_t dim) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY {
    rotate_rows<uint16_t, true>(grad, cos, sin, dx, first, rows, tokens, heads, dim);
  });
}

}  // namespace detail
}  // namespace accelerate
