#include "rms_norm_kernels.h"

#include <cmath>

#include "common/kernel_dispatch.h"
#include "nn/row_reductions.h"
#include "nn/vector_math.h"

namespace accelerate {
namespace detail {
namespace {

using vector_math::load;
using vector_math::row_dot;
using vector_math::store;

// The value `v` takes once stored as T (bfloat16 rounds; float is itself).
template <typename T>
ACCELERATE_ALWAYS_INLINE float as_stored(float v) {
  T out;
  store(v, &out);
  return load(out);
}

template <typename T>
ACCELERATE_ALWAYS_INLINE void forward_rows(const T* x, const T* w, T* y, float* rstd, int64_t rows,
                                           int64_t width, float eps) {
  for (int64_t row = 0; row < rows; ++row) {
    const T* xr = x + row * width;
    T* yr = y + row * width;
    const float r = 1.0f / std::sqrt(row_dot(xr, xr, width) / static_cast<float>(width) + eps);
    rstd[row] = r;
    for (int64_t j = 0; j < width; ++j) {
      store(load(w[j]) * as_stored<T>(load(xr[j]) * r), yr + j);
    }
  }
}

template <typename T>
ACCELERATE_ALWAYS_INLINE void backward_rows(const T* grad, const T* x, const T* w,
                                            const float* rstd, T* dx, float* dw_sum, int64_t rows,
                                            int64_t width) {
  for (int64_t row = 0; row < rows; ++row) {
    const T* gr = grad + row * width;
    const T* xr = x + row * width;
    T* dxr = dx + row * width;
    const float r = rstd[row];
    // sum_k dn_k x_k, then the common factor of every x_j's term.
    float lanes[vector_math::kLanes] = {};
    int64_t k = 0;
    for (; k + vector_math::kLanes <= width; k += vector_math::kLanes) {
      for (int64_t l = 0; l < vector_math::kLanes; ++l) {
        lanes[l] += load(gr[k + l]) * load(w[k + l]) * load(xr[k + l]);
      }
    }
    float dot = 0.0f;
    for (; k < width; ++k) dot += load(gr[k]) * load(w[k]) * load(xr[k]);
    for (int64_t l = 0; l < vector_math::kLanes; ++l) dot += lanes[l];
    const float coefficient = r * r * r * dot / static_cast<float>(width);
    for (int64_t j = 0; j < width; ++j) {
      const float g = load(gr[j]);
      const float xj = load(xr[j]);
      store(r * g * load(w[j]) - coefficient * xj, dxr + j);
      dw_sum[j] += g * as_stored<T>(xj * r);
    }
  }
}

}  // namespace

void rms_norm_forward(const float* x, const float* w, float* y, float* rstd, int64_t rows,
                      int64_t width, float eps) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY { forward_rows(x, w, y, rstd, rows, width, eps); });
}

void rms_norm_forward(const uint16_t* x, const uint16_t* w, uint16_t* y, float* rstd, int64_t rows,
                      int64_t width, float eps) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY { forward_rows(x, w, y, rstd, rows, width, eps); });
}

void rms_norm_backward(const float* grad, const float* x, const float* w, const float* rstd,
                       float* dx, float* dw_sum, int64_t rows, int64_t width) {
  run_dispatched(
      [&]() ACCELERATE_KERNEL_BODY { backward_rows(grad, x, w, rstd, dx, dw_sum, rows, width); });
}

void rms_norm_backward(const uint16_t* grad, const uint16_t* x, const uint16_t* w,
                       const float* rstd, uint16_t* dx, float* dw_sum, int64_t rows,
                       int64_t width) {
  run_dispatched(
      [&]() ACCELERATE_KERNEL_BODY { backward_rows(grad, x, w, rstd, dx, dw_sum, rows, width); });
}

}  // namespace detail
}  // namespace accelerate
