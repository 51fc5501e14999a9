#include "accelerate/nn/rms_norm.h"
#include "compat/parallel_ranges.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "nn/kernel_tensors.h"
#include "nn/rms_norm_kernels.h"

namespace accelerate {
namespace {

// Rows per task of compat::parallel_ranges: a task of a 512-wide model's rows is
// tens of microseconds, more than the pool's wake-up.
int64_t rms_norm_grain_rows(int64_t width) { return std::max<int64_t>(1, (1 << 14) / width); }

// transformers' LlamaRMSNorm.forward, in LibTorch ops.
at::Tensor composite_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor variance = x32.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (x32 * at::rsqrt(variance + eps)).to(x.scalar_type());
}

struct FusedRmsNorm : torch::autograd::Function<FusedRmsNorm> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight, double eps) {
    // Named in profiler traces (an autograd Function's forward is not an op).
    RECORD_FUNCTION("accelerate::rms_norm", std::vector<c10::IValue>({x, weight}));
    const at::Tensor input = x.contiguous();
    const at::Tensor w = weight.contiguous();
    const int64_t width = input.size(-1);
    const int64_t rows = width == 0 ? 0 : input.numel() / width;
    at::Tensor y = at::empty_like(input);
    at::Tensor rstd = at::empty({rows}, input.options().dtype(at::kFloat));
    compat::parallel_ranges(rows, rms_norm_grain_rows(width), [&](int64_t begin, int64_t end) {
      float* r = rstd.data_ptr<float>() + begin;
      if (input.scalar_type() == at::kFloat) {
        detail::rms_norm_forward(input.data_ptr<float>() + begin * width, w.data_ptr<float>(),
                                 y.data_ptr<float>() + begin * width, r, end - begin, width,
                                 static_cast<float>(eps));
      } else {
        detail::rms_norm_forward(detail::bf16_bits(input) + begin * width, detail::bf16_bits(w),
                                 detail::bf16_bits(y) + begin * width, r, end - begin, width,
                                 static_cast<float>(eps));
      }
    });
    ctx->save_for_backward({input, w, rstd});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const at::Tensor& rstd = saved[2];
    const at::Tensor grad = grads[0].to(x.scalar_type()).contiguous();
    const int64_t width = x.size(-1);
    const int64_t rows = width == 0 ? 0 : x.numel() / width;
    at::Tensor dx = at::empty_like(x);
    // One float row of weight-gradient sums per thread, added up after.
    at::Tensor dw_sums = at::zeros({at::get_num_threads(), width}, rstd.options());
    compat::parallel_ranges(rows, rms_norm_grain_rows(width), [&](int64_t begin, int64_t end) {
      float* dw = dw_sums.data_ptr<float>() + at::get_thread_num() * width;
      const float* r = rstd.data_ptr<float>() + begin;
      if (x.scalar_type() == at::kFloat) {
        detail::rms_norm_backward(grad.data_ptr<float>() + begin * width,
                                  x.data_ptr<float>() + begin * width, w.data_ptr<float>(), r,
                                  dx.data_ptr<float>() + begin * width, dw, end - begin, width);
      } else {
        detail::rms_norm_backward(detail::bf16_bits(grad) + begin * width,
                                  detail::bf16_bits(x) + begin * width, detail::bf16_bits(w), r,
                                  detail::bf16_bits(dx) + begin * width, dw, end - begin, width);
      }
    });
    return {dx, dw_sums.sum(0).to(w.scalar_type()), at::Tensor()};
  }
};

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (x.dim() == 0 || weight.dim() != 1 || weight.size(0) != x.size(-1)) {
    throw Error("rms_norm: weight must be [" + std::to_string(x.dim() ? x.size(-1) : 0) +
                "] for x of shape " + c10::str(x.sizes()) + ", got " + c10::str(weight.sizes()));
  }
  if (!detail::fused_kernel_takes(x) || weight.scalar_type() != x.scalar_type() ||
      !weight.device().is_cpu()) {
    return composite_rms_norm(x, weight, eps);
  }
  return FusedRmsNorm::apply(x, weight, eps);
}

}  // namespace accelerate
