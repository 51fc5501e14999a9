// Row reductions for the library's softmax-shaped kernels
// (cross_entropy_kernels.cpp, causal_softmax_kernels.cpp): inline, for
// files built like vector_math.h says.
#pragma once

#include <cstdint>
#include <limits>

#include "nn/vector_math.h"

namespace accelerate {
namespace detail {
namespace vector_math {

// Independent partial results per lane, so that the reductions vectorize
// without reassociating a single float sum (which GCC does not do unasked).
constexpr int64_t kLanes = 16;

// max_j x_j over n values (-inf for n = 0); NaNs are skipped here, the sums
// below carry them.
template <typename T>
ACCELERATE_ALWAYS_INLINE float row_max(const T* x, int64_t n) {
  float lanes[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) lanes[l] = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) {
      const float v = load(x[j + l]);
      lanes[l] = lanes[l] < v ? v : lanes[l];
    }
  }
  float best = -std::numeric_limits<float>::infinity();
  for (; j < n; ++j) best = best < load(x[j]) ? load(x[j]) : best;
  for (int64_t l = 0; l < kLanes; ++l) best = best < lanes[l] ? lanes[l] : best;
  return best;
}

// sum_j exp(scale (x_j - shift)) for shift >= every x_j and scale > 0, so
// that every exponent is <= 0; a NaN among the x_j makes it NaN.
template <typename T>
ACCELERATE_ALWAYS_INLINE float row_exp_sum(const T* x, int64_t n, float shift, float scale) {
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) {
      lanes[l] += fast_exp_nonpositive(scale * (load(x[j + l]) - shift));
    }
  }
  float sum = 0.0f;
  for (; j < n; ++j) sum += fast_exp_nonpositive(scale * (load(x[j]) - shift));
  for (int64_t l = 0; l < kLanes; ++l) sum += lanes[l];
  return sum;
}

// sum_j x_j.
ACCELERATE_ALWAYS_INLINE float row_sum(const float* x, int64_t n) {
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += x[j + l];
  }
  float sum = 0.0f;
  for (; j < n; ++j) sum += x[j];
  for (int64_t l = 0; l < kLanes; ++l) sum += lanes[l];
  return sum;
}

// sum_j a_j b_j.
template <typename T>
ACCELERATE_ALWAYS_INLINE float row_dot(const T* a, const T* b, int64_t n) {
  float lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += load(a[j + l]) * load(b[j + l]);
  }
  float sum = 0.0f;
  for (; j < n; ++j) sum += load(a[j]) * load(b[j]);
  for (int64_t l = 0; l < kLanes; ++l) sum += lanes[l];
  return sum;
}

}  // namespace vector_math
}  // namespace detail
}  // namespace accelerate
