#include "gelu_kernels.h"

#include "common/kernel_dispatch.h"
#include "nn/vector_math.h"

namespace accelerate {
namespace detail {
namespace {

using vector_math::fast_exp_nonpositive;
using vector_math::load;
using vector_math::store;

constexpr float kSqrtTwoOverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// For u = sqrt(2/pi) (x + 0.044715 x^3) and a = exp(-2|u|) in [0, 1]:
// (1 + tanh u) / 2 = sigmoid(2u) is 1 / (1 + a) for u >= 0 and a / (1 + a)
// for u < 0, and 1 - tanh^2 u = 4 a / (1 + a)^2. Nothing overflows, and
// neither tail cancels (LibTorch's 1 + tanh u gives 0 for x < -5).
struct TanhTerms {
  float half_one_plus_tanh;
  float one_minus_tanh_squared;
};

ACCELERATE_ALWAYS_INLINE TanhTerms tanh_terms(float x) {
  const float u = kSqrtTwoOverPi * (x + kCubic * x * x * x);
  const float a = fast_exp_nonpositive(-2.0f * (u < 0.0f ? -u : u));
  const float inverse = 1.0f / (1.0f + a);
  return {u >= 0.0f ? inverse : a * inverse, 4.0f * a * inverse * inverse};
}

ACCELERATE_ALWAYS_INLINE float forward_value(float x) {
  const float y = x * tanh_terms(x).half_one_plus_tanh;
  return x != x ? x : y;  // NaN stays NaN
}

ACCELERATE_ALWAYS_INLINE float backward_value(float g, float x) {
  const TanhTerms t = tanh_terms(x);
  const float inner = kSqrtTwoOverPi * (1.0f + 3.0f * kCubic * x * x);
  const float d = g * (t.half_one_plus_tanh + 0.5f * x * t.one_minus_tanh_squared * inner);
  return x != x ? x : d;
}

template <typename T>
ACCELERATE_ALWAYS_INLINE void forward_loop(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store(forward_value(load(x[i])), y + i);
}

template <typename T>
ACCELERATE_ALWAYS_INLINE void backward_loop(const T* grad, const T* x, T* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store(backward_value(load(grad[i]), load(x[i])), dx + i);
}

}  // namespace

void gelu_tanh_forward(const float* x, float* y, int64_t n) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY { forward_loop(x, y, n); });
}

void gelu_tanh_forward(const uint16_t* x, uint16_t* y, int64_t n) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY { forward_loop(x, y, n); });
}

void gelu_tanh_backward(const float* grad, const float* x, float* dx, int64_t n) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY { backward_loop(grad, x, dx, n); });
}

void gelu_tanh_backward(const uint16_t* grad, const uint16_t* x, uint16_t* dx, int64_t n) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY { backward_loop(grad, x, dx, n); });
}

}  // namespace detail
}  // namespace accelerate
