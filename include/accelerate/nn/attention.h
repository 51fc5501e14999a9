// Self-attention for transformers: causal (decoder-only, GPT-style models)
// or bidirectional with a padding mask (encoders, BERT-style models), on the
// fastest kernel measured for the case: LibTorch 2.x's fused
// scaled_dot_product_attention where it exists, otherwise the explicit
// masked-softmax form (LibTorch 1.13). Causal attention on CPU up to 1024
// tokens takes the explicit form everywhere: without dropout it runs over
// blocks of 64 queries that skip the masked keys beyond each block, with
// the scale, mask and softmax as one fused kernel of the library's: on
// GPT-2 small's layer it ran 1.18-2.1x as fast as LibTorch 2.15's fused
// kernel at 256 tokens, 1.10-1.29x at 1024 (bench/gpt/attention_bench;
// docs/kernels.md). With dropout only bfloat16 up to 256 tokens does (the
// explicit form then computes all scores).
//
//   // q, k, v: [batch, heads, tokens, head_dim]
//   auto y = accelerate::causal_attention(q, k, v,
//                                         accelerate::AttentionOptions().dropout_p(0.1));
//   // key_mask: [batch, tokens], nonzero where a token is real, 0 at padding
//   auto z = accelerate::bidirectional_attention(q, k, v, key_mask);
//
// Both kernels compute softmax(q k^T / sqrt(head_dim) + causal mask) v,
// with dropout on the attention weights; they agree to rounding, not
// bitwise (the fused kernels order their sums differently).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <optional>

#include "accelerate/common/arg.h"

namespace accelerate {

enum class AttentionKernel {
  kAuto,      // fused where available (but see above for causal on CPU), else explicit
  kFused,     // at::scaled_dot_product_attention; Error where it does not exist
  kExplicit,  // matmul, mask + softmax (fused and blocked for causal on CPU), dropout, matmul
};

struct AttentionOptions {
  // Probability of zeroing an attention weight; pass 0 when not training.
  ACCELERATE_ARG(double, dropout_p) = 0.0;
  ACCELERATE_ARG(AttentionKernel, kernel) = AttentionKernel::kAuto;
  // causal_attention only: > 0, each query sees itself and the
  // sliding_window - 1 keys before it (Mistral's and Qwen2's sliding-window
  // attention, transformers' sliding_window); 0: the whole past.
  ACCELERATE_ARG(int64_t, sliding_window) = 0;
  // Draw the dropout mask from this generator, not the default one (a
  // tensor-parallel rank's own stream for its heads: split_dropout_generator
  // in tensor_parallel.h). The fused kernels draw their own masks, so with
  // one and dropout_p > 0 kAuto takes the explicit kernel and kFused is
  // refused.
  ACCELERATE_ARG(std::optional<at::Generator>, dropout_generator);
};

// Whether this LibTorch has the fused kernel.
bool fused_attention_available();

// softmax(q k^T / sqrt(d) masked to j <= i) v for q, k, v of shape
// [batch, heads, tokens, head_dim] (with a sliding window: to
// i - sliding_window < j <= i). Throws accelerate::Error for other ranks,
// mismatched shapes or a negative sliding_window.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            AttentionOptions options = {});

// softmax(q k^T / sqrt(d) + mask) v with every query seeing every key except
// those key_mask leaves out: key_mask is [batch, tokens] (transformers'
// attention_mask: nonzero keeps a key, 0 drops it), or undefined for none.
// Dropped keys get the dtype's lowest value added, not -inf, as in
// transformers, so a query whose keys are all dropped averages them
// instead of giving NaN. Throws accelerate::Error for bad shapes.
at::Tensor bidirectional_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& key_mask = {}, AttentionOptions options = {});

}  // namespace accelerate
