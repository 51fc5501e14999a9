#include "silu_kernels.h"

#include "common/kernel_dispatch.h"
#include "nn/vector_math.h"

namespace accelerate {
namespace detail {
namespace {

using vector_math::fast_exp_nonpositive;
using vector_math::load;
using vector_math::store;

// sigmoid(a) = 1 / (1 + e) for a >= 0 and e / (1 + e) below, e = exp(-|a|).
ACCELERATE_ALWAYS_INLINE float sigmoid(float a) {
  const float e = fast_exp_nonpositive(a < 0.0f ? a : -a);
  const float inverse = 1.0f / (1.0f + e);
  return a >= 0.0f ? inverse : e * inverse;
}

// silu(a) as stored in T (the composite rounds it before the product).
template <typename T>
ACCELERATE_ALWAYS_INLINE float stored_silu(float a, float s) {
  T out;
  store(a * s, &out);
  const float value = load(out);
  return a != a ? a : value;  // NaN stays NaN
}

template <typename T>
ACCELERATE_ALWAYS_INLINE void forward_loop(const T* a, const T* b, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float ai = load(a[i]);
    store(stored_silu<T>(ai, sigmoid(ai)) * load(b[i]), y + i);
  }
}

template <typename T>
ACCELERATE_ALWAYS_INLINE void backward_loop(const T* grad, const T* a, const T* b, T* da, T* db,
                                            int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = load(grad[i]);
    const float ai = load(a[i]);
    const float s = sigmoid(ai);
    const float d = g * load(b[i]) * s * (1.0f + ai * (1.0f - s));
    store(ai != ai ? ai : d, da + i);
    store(g * stored_silu<T>(ai, s), db + i);
  }
}

}  // namespace

void silu_mul_forward(const float* a, const float* b, float* y, int64_t n) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY { forward_loop(a, b, y, n); });
}

void silu_mul_forward(const uint16_t* a, const uint16_t* b, uint16_t* y, int64_t n) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY { forward_loop(a, b, y, n); });
}

void silu_mul_backward(const float* grad, const float* a, const float* b, float* da, float* db,
                       int64_t n) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY { backward_loop(grad, a, b, da, db, n); });
}

void silu_mul_backward(const uint16_t* grad, const uint16_t* a, const uint16_t* b, uint16_t* da,
                       uint16_t* db, int64_t n) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY { backward_loop(grad, a, b, da, db, n); });
}

}  // namespace detail
}  // namespace accelerate
