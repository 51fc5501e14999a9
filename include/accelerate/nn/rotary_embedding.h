// Rotary position embeddings in transformers' rotate_half layout (Llama,
// Mistral, Qwen2, GPT-NeoX), on a fused kernel of the library's:
//
//   // q: [batch, tokens, heads, head_dim], the projection's own layout;
//   // cos, sin: [tokens, head_dim] for the positions of those tokens
//   auto rotated = accelerate::rotary_embedding(q, cos, sin);
//
//   rotated = q * cos + rotate_half(q) * sin,
//   rotate_half(q) = cat(-q[..., head_dim/2:], q[..., :head_dim/2])
//
// with cos and sin broadcast over batch and heads. On CPU float and
// bfloat16 tensors (cos and sin of q's dtype, as transformers casts them)
// this is one pass forward and one backward in float, rounded once; the
// composite of LibTorch ops (five passes each way, each rounded) runs
// elsewhere. Differentiable in q (not in cos and sin).
#pragma once

#include <ATen/core/Tensor.h>

namespace accelerate {

// Throws accelerate::Error (one line) for shapes other than the above or an
// odd head_dim.
at::Tensor rotary_embedding(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace accelerate
