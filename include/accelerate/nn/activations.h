// Activation functions of transformer MLPs on kernels of the library's own
// where LibTorch's are slow.
//
//   auto h = accelerate::gelu(fc(x), accelerate::GeluApproximation::kTanh);  // GPT-2's gelu_new
//   auto m = accelerate::silu_mul(gate_proj(x), up_proj(x));                 // Llama's MLP
//
// The tanh-approximated GELU is what GPT-2 ("gelu_new", "gelu_pytorch_tanh")
// uses; LibTorch's CPU kernel for it is several times slower than a memory
// pass (in bfloat16 on LibTorch 1.13, ~7x: it took 17% of a bf16 GPT step,
// docs/gpt-performance.md). On CPU float and bfloat16 tensors this runs
// one fused, vectorized pass forward and one backward (recomputing tanh
// from the saved input, as LibTorch does); everywhere else (CUDA, other
// dtypes, the exact GELU) it is at::gelu. Results agree with at::gelu to
// float rounding: bfloat16 outputs are computed in float and rounded to
// nearest even, as LibTorch does.
#pragma once

#include <ATen/core/Tensor.h>

namespace accelerate {

enum class GeluApproximation {
  kNone,  // x Phi(x), the exact GELU (erf): at::gelu(x)
  kTanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): at::gelu(x, "tanh")
};

// GELU of x, differentiable.
at::Tensor gelu(const at::Tensor& x, GeluApproximation approximation = GeluApproximation::kNone);

// silu(gate) * up, the gated MLP activation of Llama-family models
// (down_proj(silu(gate_proj(x)) * up_proj(x))), differentiable in both.
// On CPU float and bfloat16 tensors of one shape and dtype: one fused pass
// forward and one backward (the composite takes two and three, and keeps
// silu(gate) as well); elsewhere at::silu(gate) * up. In bfloat16
// silu(gate) is rounded before the product, as the composite rounds it.
at::Tensor silu_mul(const at::Tensor& gate, const at::Tensor& up);

}  // namespace accelerate
