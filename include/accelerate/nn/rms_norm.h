// Root-mean-square layer normalisation, as transformers' LlamaRMSNorm (and
// Mistral's, Qwen2's) computes it, on a fused kernel of the library's:
//
//   auto y = accelerate::rms_norm(x, weight, 1e-6);  // x [..., width], weight [width]
//
//   y = weight * (x / sqrt(mean(x^2 over the last dimension) + eps))
//
// in float whatever x's dtype, the normalised value rounded to x's dtype
// before the weight multiplies it. On CPU float and bfloat16 tensors with a
// weight of the same dtype this is one pass forward and one backward (the
// composite takes about five each way, every one over the whole tensor);
// elsewhere it is the composite of LibTorch ops. The two agree to float
// rounding (their sums run in different orders). Differentiable in x and
// weight.
#pragma once

#include <ATen/core/Tensor.h>

namespace accelerate {

// Throws accelerate::Error (one line) when weight is not [x.size(-1)].
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace accelerate
