// Causal attention over blocks of queries (internal to the nn area; the
// explicit kernel of accelerate::causal_attention takes it on CPU).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace accelerate {
namespace detail {

// softmax(scale q k^T, causal) v for q, k, v [batch, heads, tokens, head_dim]
// on CPU in float or bfloat16, computed per block of `query_block` queries:
// the queries [a, b) multiply only the keys and values [0, b), so the
// products skip the masked upper triangle outside the diagonal blocks (with
// blocks of tokens / 4, 5/8 of the full products' work). Each block's
// scores go through the library's fused causal softmax; backward computes
// the gradients of q, k and v from the saved probabilities, block by block.
// No dropout (the caller keeps the one-block path for it).
// Whether blocked_causal_attention takes q: CPU, with products in float or
// bfloat16 (q's type, or CPU autocast's).
bool blocked_causal_attention_takes(const at::Tensor& q);

// Which matrix products the blocks run on. kAuto: the library's own
// (small_gemm.h, float_causal_attention.h) for float where they are
// preferred, else LibTorch's (kLibTorch: OpenBLAS in float on Debian's
// build, oneDNN or MKL in bfloat16). kSmallGemm insists on the own ones (an
// accelerate::Error where they cannot run): for tests and benchmarks.
enum class BlockProducts { kAuto, kLibTorch, kSmallGemm };

at::Tensor blocked_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    double scale, int64_t query_block,
                                    BlockProducts products = BlockProducts::kAuto);

}  // namespace detail
}  // namespace accelerate
