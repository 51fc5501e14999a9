// The inner loop of accelerate::FusedAdamW (fused_adamw.cpp): one pass over
// a float parameter, its gradient and its two moments. Internal.
#pragma once

#include <cstdint>

namespace accelerate::detail {

// The step's scalars, computed once per parameter in double and rounded to
// float as LibTorch rounds a Scalar for a float tensor.
struct AdamWScalars {
  float decay_factor;  // 1 - lr * weight_decay
  float beta1;         // first moment: m = beta1 m + (1 - beta1) g
  float one_minus_beta1;
  float beta2;  // second moment: v = beta2 v + (1 - beta2) g^2
  float one_minus_beta2;
  float sqrt_correction2;  // sqrt(1 - beta2^t)
  float eps;
  float neg_step_size;  // -lr / (1 - beta1^t)
};

// For i in [0, n): LibTorch's AdamW update of param[i], exp_avg[i] and
// exp_avg_sq[i] from grad[i], in the same order of operations:
//   p = p (1 - lr wd); m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2
//   p = p - step_size m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                const AdamWScalars& s);

}  // namespace accelerate::detail
