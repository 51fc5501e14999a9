#include "accelerate/nn/activations.h"
#include "compat/parallel_ranges.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>
#include <vector>

#include "nn/gelu_kernels.h"
#include "nn/kernel_tensors.h"
#include "nn/silu_kernels.h"

namespace accelerate {
namespace {

// Elements per task of compat::parallel_ranges: large enough that a task outlasts
// the pool's wake-up, small enough that both halves of a 2-core machine get
// work from a 16 x 256 x 1536 MLP activation.
constexpr int64_t kGrain = 1 << 15;

at::Tensor tanh_gelu_forward(const at::Tensor& x) {
  at::Tensor y = at::empty_like(x);
  compat::parallel_ranges(x.numel(), kGrain, [&](int64_t begin, int64_t end) {
    if (x.scalar_type() == at::kFloat) {
      detail::gelu_tanh_forward(x.data_ptr<float>() + begin, y.data_ptr<float>() + begin,
                                end - begin);
    } else {
      detail::gelu_tanh_forward(detail::bf16_bits(x) + begin, detail::bf16_bits(y) + begin,
                                end - begin);
    }
  });
  return y;
}

at::Tensor tanh_gelu_backward(const at::Tensor& grad, const at::Tensor& x) {
  at::Tensor dx = at::empty_like(x);
  compat::parallel_ranges(x.numel(), kGrain, [&](int64_t begin, int64_t end) {
    if (x.scalar_type() == at::kFloat) {
      detail::gelu_tanh_backward(grad.data_ptr<float>() + begin, x.data_ptr<float>() + begin,
                                 dx.data_ptr<float>() + begin, end - begin);
    } else {
      detail::gelu_tanh_backward(detail::bf16_bits(grad) + begin, detail::bf16_bits(x) + begin,
                                 detail::bf16_bits(dx) + begin, end - begin);
    }
  });
  return dx;
}

// The saved input is what backward needs (tanh is recomputed, as LibTorch's
// GeluBackward does), so the memory kept per call is LibTorch's.
struct FusedTanhGelu : torch::autograd::Function<FusedTanhGelu> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    // Named in profiler traces (an autograd Function's forward is not an op).
    RECORD_FUNCTION("accelerate::gelu_tanh", std::vector<c10::IValue>({x}));
    const at::Tensor input = x.contiguous();
    ctx->save_for_backward({input});
    return tanh_gelu_forward(input);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    const at::Tensor grad = grads[0].to(x.scalar_type()).contiguous();
    return {tanh_gelu_backward(grad, x)};
  }
};

at::Tensor silu_mul_forward(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor y = at::empty_like(a);
  compat::parallel_ranges(a.numel(), kGrain, [&](int64_t begin, int64_t end) {
    if (a.scalar_type() == at::kFloat) {
      detail::silu_mul_forward(a.data_ptr<float>() + begin, b.data_ptr<float>() + begin,
                               y.data_ptr<float>() + begin, end - begin);
    } else {
      detail::silu_mul_forward(detail::bf16_bits(a) + begin, detail::bf16_bits(b) + begin,
                               detail::bf16_bits(y) + begin, end - begin);
    }
  });
  return y;
}

// Saves both inputs (the composite keeps silu(gate) too); backward
// recomputes the sigmoid and writes both gradients in one pass.
struct FusedSiluMul : torch::autograd::Function<FusedSiluMul> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& gate,
                            const at::Tensor& up) {
    RECORD_FUNCTION("accelerate::silu_mul", std::vector<c10::IValue>({gate, up}));
    const at::Tensor a = gate.contiguous(), b = up.contiguous();
    ctx->save_for_backward({a, b});
    return silu_mul_forward(a, b);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& a = saved[0];
    const at::Tensor& b = saved[1];
    const at::Tensor grad = grads[0].to(a.scalar_type()).contiguous();
    at::Tensor da = at::empty_like(a), db = at::empty_like(b);
    compat::parallel_ranges(a.numel(), kGrain, [&](int64_t begin, int64_t end) {
      if (a.scalar_type() == at::kFloat) {
        detail::silu_mul_backward(grad.data_ptr<float>() + begin, a.data_ptr<float>() + begin,
                                  b.data_ptr<float>() + begin, da.data_ptr<float>() + begin,
                                  db.data_ptr<float>() + begin, end - begin);
      } else {
        detail::silu_mul_backward(detail::bf16_bits(grad) + begin, detail::bf16_bits(a) + begin,
                                  detail::bf16_bits(b) + begin, detail::bf16_bits(da) + begin,
                                  detail::bf16_bits(db) + begin, end - begin);
      }
    });
    return {da, db};
  }
};

}  // namespace

at::Tensor silu_mul(const at::Tensor& gate, const at::Tensor& up) {
  if (!detail::fused_kernel_takes(gate) || !detail::fused_kernel_takes(up) ||
      gate.scalar_type() != up.scalar_type() || !gate.sizes().equals(up.sizes())) {
    return at::silu(gate) * up;
  }
  return FusedSiluMul::apply(gate, up);
}

at::Tensor gelu(const at::Tensor& x, GeluApproximation approximation) {
  if (approximation == GeluApproximation::kNone) return at::gelu(x);
  if (!detail::fused_kernel_takes(x)) return at::gelu(x, "tanh");
  return FusedTanhGelu::apply(x);
}

}  // namespace accelerate
