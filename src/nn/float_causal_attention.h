// The blocked causal attention's float form on the library's own small
// products (small_gemm.h; internal to the nn area).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace accelerate {
namespace detail {

// Whether float_causal_attention takes q, k, v: float, on CPU, strided, not
// under CPU autocast to another type, on a CPU where small_gemm is preferred.
bool float_causal_attention_takes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// blocked_causal_attention's result and gradients (the same query blocks,
// the same fused causal softmax), with three differences that save a copy
// each: q, k and v are read through their strides (GPT-2's are views of one
// fused projection), the output and the gradients are laid out [batch,
// tokens, heads, head_dim] (their transpose(1, 2) is contiguous, so the
// heads merge back into the model's width as a view), and the incoming
// gradient is read through its strides.
at::Tensor float_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  double scale, int64_t query_block);

}  // namespace detail
}  // namespace accelerate
