#include "nn/cross_entropy_kernels.h"

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
using vector_math::row_exp_sum;
using vector_math::row_max;
using vector_math::store;

// log sum_j exp(x_j), shifted by the row maximum so every exponent is <= 0.
// A NaN anywhere, or infinities, give NaN, as LibTorch's log_softmax does.
template <typename T>
ACCELERATE_ALWAYS_INLINE float row_logsumexp(const T* x, int64_t classes) {
  const float top = row_max(x, classes);
  const float sum = row_exp_sum(x, classes, top, 1.0f);
  if (std::isnan(sum) || std::isinf(top)) return std::numeric_limits<float>::quiet_NaN();
  return top + std::log(sum);
}

template <typename T>
ACCELERATE_ALWAYS_INLINE void forward_rows(const T* logits, int64_t rows, int64_t classes,
                                           const int64_t* targets, int64_t ignore_index, float* lse,
                                           float* loss) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = logits + r * classes;
    lse[r] = row_logsumexp(x, classes);
    loss[r] = targets[r] == ignore_index ? 0.0f : lse[r] - load(x[targets[r]]);
  }
}

template <typename T>
ACCELERATE_ALWAYS_INLINE void backward_rows(const T* logits, int64_t rows, int64_t classes,
                                            const int64_t* targets, int64_t ignore_index,
                                            const float* lse, const float* row_scale, T* grad) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = logits + r * classes;
    T* g = grad + r * classes;
    const bool ignored = targets[r] == ignore_index;
    const float scale = ignored ? 0.0f : row_scale[r];
    const float shift = lse[r];
    for (int64_t j = 0; j < classes; ++j) {
      store(scale * fast_exp_nonpositive(load(x[j]) - shift), g + j);
    }
    if (!ignored) store(load(g[targets[r]]) - scale, g + targets[r]);
  }
}

}  // namespace

void cross_entropy_forward(const float* logits, int64_t rows, int64_t classes,
                           const int64_t* targets, int64_t ignore_index, float* lse, float* loss) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY {
    forward_rows(logits, rows, classes, targets, ignore_index, lse, loss);
  });
}

void cross_entropy_forward(const uint16_t* logits, int64_t rows, int64_t classes,
                           const int64_t* targets, int64_t ignore_index, float* lse, float* loss) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY {
    forward_rows(logits, rows, classes, targets, ignore_index, lse, loss);
  });
}

void cross_entropy_backward(const float* logits, int64_t rows, int64_t classes,
                            const int64_t* targets, int64_t ignore_index, const float* lse,
                            const float* row_scale, float* grad) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY {
    backward_rows(logits, rows, classes, targets, ignore_index, lse, row_scale, grad);
  });
}

void cross_entropy_backward(const uint16_t* logits, int64_t rows, int64_t classes,
                            const int64_t* targets, int64_t ignore_index, const float* lse,
                            const float* row_scale, uint16_t* grad) {
  run_dispatched([&]() ACCELERATE_KERNEL_BODY {
    backward_rows(logits, rows, classes, targets, ignore_index, lse, row_scale, grad);
  });
}

}  // namespace detail
}  // namespace accelerate
