// Attention kernels that exist only in some LibTorch versions.
#pragma once

#include <ATen/core/Tensor.h>

namespace accelerate {
namespace compat {

// Whether at::scaled_dot_product_attention (fused attention, 2.0+) exists.
bool has_fused_attention();

// Causal attention with LibTorch's fused kernel; throws Error where
// has_fused_attention() is false.
at::Tensor fused_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  double dropout_p);

// Non-causal attention with an additive mask broadcasting to
// [batch, heads, tokens, tokens] (undefined: none), on the fused kernel.
at::Tensor fused_masked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& additive_mask, double dropout_p);

}  // namespace compat
}  // namespace accelerate
