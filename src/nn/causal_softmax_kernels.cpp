#include "nn/causal_softmax_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/kernel_dispatch.h"
#include "nn/row_reductions.h"
#include "nn/vector_math.h"

namespace accelerate {
namespace detail {
namespace {

using vector_math::fast_exp_nonpositive;
using vector_math::load;
using vector_math::row_dot;
using vector_math::row_exp_sum;
using vector_math::row_max;
using vector_math::row_sum;
using vector_math::store;

// Keys row r sees: [0, seen).
ACCELERATE_ALWAYS_INLINE int64_t seen_keys(int64_t r, const CausalRows& shape) {
  const int64_t last = r % shape.queries + shape.offset;
  return std::min(shape.keys, std::max<int64_t>(0, last + 1));
}

// Rows up to this long keep their exponentials in a float buffer between
// the sum and the normalisation, so each is computed once.
constexpr int64_t kBufferedKeys = 1024;

template <typename T>
ACCELERATE_ALWAYS_INLINE void forward_rows(const T* scores, T* probs, const CausalRows& shape) {
  float buffer[kBufferedKeys];
  for (int64_t r = 0; r < shape.rows; ++r) {
    const T* s = scores + r * shape.keys;
    T* p = probs + r * shape.keys;
    const int64_t seen = seen_keys(r, shape);
    const float top = row_max(s, seen);
    const bool buffered = seen <= kBufferedKeys;
    float sum = 0.0f;
    if (buffered) {
      for (int64_t j = 0; j < seen; ++j) {
        buffer[j] = fast_exp_nonpositive(shape.scale * (load(s[j]) - top));
      }
      sum = row_sum(buffer, seen);
    } else {
      sum = row_exp_sum(s, seen, top, shape.scale);
    }
    // A NaN score or an infinite maximum makes the row NaN, as LibTorch's
    // softmax does (the clamped exponent would otherwise hide it).
    const bool poisoned = std::isnan(sum) || std::isinf(top);
    const float inverse = poisoned ? std::numeric_limits<float>::quiet_NaN() : 1.0f / sum;
    if (buffered) {
      for (int64_t j = 0; j < seen; ++j) store(buffer[j] * inverse, p + j);
    } else {
      for (int64_t j = 0; j < seen; ++j) {
        store(fast_exp_nonpositive(shape.scale * (load(s[j]) - top)) * inverse, p + j);
      }
    }
    for (int64_t j = seen; j < shape.keys; ++j) store(0.0f, p + j);
  }
}

template <typename T>
ACCELERATE_ALWAYS_INLINE void backward_rows(const T* probs, const T* grad, T* grad_scores,
                                            const CausalRows& shape) {
  for (int64_t r = 0; r < shape.rows; ++r) {
    const T* p = probs + r * shape.keys;
    const T* g = grad + r * shape.keys;
    T* d = grad_scores + r * shape.keys;
    const int64_t seen = seen_keys(r, shape);
    const float dot = row_dot(p, g, seen);
    for (int64_t j = 0; j < seen; ++j) {
      store(shape.scale * load(p[j]) * (load(g[j]) - dot), d + j);
    }
    for (int64_t j = seen; j < shape.keys; ++j) store(0.0f, d + j);
  }
}

}  // namespace

void causal_softmax_forward(const float* scores, float* probs, CausalRows shape) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY { forward_rows(scores, probs, shape); });
}

void causal_softmax_forward(const uint16_t* scores, uint16_t* probs, CausalRows shape) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY { forward_rows(scores, probs, shape); });
}

void causal_softmax_backward(const float* probs, const float* grad, float* grad_scores,
                             CausalRows shape) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY { backward_rows(probs, grad, grad_scores, shape); });
}

void causal_softmax_backward(const uint16_t* probs, const uint16_t* grad, uint16_t* grad_scores,
                             CausalRows shape) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY { backward_rows(probs, grad, grad_scores, shape); });
}

}  // namespace detail
}  // namespace accelerate
