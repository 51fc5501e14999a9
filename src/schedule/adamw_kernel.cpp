#include "schedule/adamw_kernel.h"

#include <cmath>

#include "common/kernel_dispatch.h"
#include "nn/vector_math.h"

namespace accelerate::detail {

namespace {

// Compiled at -O3 with -fno-math-errno (sources.cmake), so that GCC
// vectorizes the loop and its sqrt, once per instruction set
// (common/kernel_dispatch.h).
ACCELERATE_ALWAYS_INLINE void adamw_loop(float* param, const float* grad, float* exp_avg,
                                         float* exp_avg_sq, int64_t n, const AdamWScalars& s) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i];
    const float m = exp_avg[i] * s.beta1 + s.one_minus_beta1 * g;
    const float v = exp_avg_sq[i] * s.beta2 + s.one_minus_beta2 * (g * g);
    const float denom = std::sqrt(v) / s.sqrt_correction2 + s.eps;
    param[i] = param[i] * s.decay_factor + s.neg_step_size * (m / denom);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

}  // namespace

void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                const AdamWScalars& s) {
  run_dispatched(
      [&]() ACCELERATE_KERNEL_BODY { adamw_loop(param, grad, exp_avg, exp_avg_sq, n, s); });
}

}  // namespace accelerate::detail
