#include "accelerate/nn/attention.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <string>

#include "accelerate/common/errors.h"
#include "compat/attention_compat.h"
#include "nn/blocked_causal_attention.h"
#include "nn/causal_softmax.h"
#include "nn/dropout_mask.h"

namespace accelerate {
namespace {

std::string shape_text(const at::Tensor& t) {
  std::string text = "[";
  for (int64_t i = 0; i < t.dim(); ++i) text += (i ? ", " : "") + std::to_string(t.size(i));
  return text + "]";
}

// Queries per block of the explicit kernel on CPU without dropout
// (detail::blocked_causal_attention). On GPT small's layer (16 x 6 heads,
// 256 tokens, head_dim 64; bench/gpt/attention_bench, forward + backward,
// 2-core Intel VM, LibTorch 1.13) against one block of 256, before the
// threads split the matrices: 1 thread float 65-77 ms against 88-94 (the
// old matmul form: 103-112), bfloat16 67-78 against 87-90; 2 threads
// bfloat16 34-44 against 45-47, float 82-92 against 88-89; blocks of 32
// were slower than 64 everywhere (docs/kernels.md).
constexpr int64_t kQueryBlock = 64;

// The attention weights' dropout: from the options' generator where they
// name one, else from the default generator.
at::Tensor drop_weights(const at::Tensor& weights, const AttentionOptions& options) {
  if (options.dropout_p() == 0) return weights;
  if (options.dropout_generator()) {
    return detail::dropout_from(weights, options.dropout_p(), *options.dropout_generator());
  }
  return at::dropout(weights, options.dropout_p(), /*train=*/true);
}

// Whether the explicit causal kernel runs blocked (it keeps the full form
// with dropout: the weights' dropout mask would need its own saving).
bool explicit_causal_is_blocked(const at::Tensor& q, double dropout_p) {
  return dropout_p == 0 && detail::blocked_causal_attention_takes(q);
}

at::Tensor explicit_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const AttentionOptions& options) {
  const int64_t tokens = q.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  if (explicit_causal_is_blocked(q, options.dropout_p())) {
    return detail::blocked_causal_attention(q, k, v, scale, kQueryBlock);
  }
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1));
  if (detail::has_fused_causal_softmax(scores)) {
    // Scale, mask and softmax in one pass, in float, written in the scores'
    // type (under bf16 autocast: bf16, what the next matmul casts to anyway).
    const at::Tensor weights = detail::fused_causal_softmax(scores, scale);
    return at::matmul(drop_weights(weights, options), v);
  }
  scores = scores * scale;
  const at::Tensor future =
      at::ones({tokens, tokens}, q.options().dtype(at::kBool)).triu(/*diagonal=*/1);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  return at::matmul(drop_weights(at::softmax(scores, -1), options), v);
}

// A keep-mask -> an additive mask of q's dtype: 0 where kept, the dtype's
// lowest value where dropped (transformers' eager masks).
at::Tensor additive_mask(const at::Tensor& keep, const at::Tensor& q) {
  const double lowest = q.scalar_type() == at::kDouble ? std::numeric_limits<double>::lowest()
                        : q.scalar_type() == at::kHalf ? -65504.0
                        : q.scalar_type() == at::kBFloat16
                            ? static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest())
                            : static_cast<double>(std::numeric_limits<float>::lowest());
  return at::zeros(keep.sizes(), q.options()).masked_fill(keep.logical_not(), lowest);
}

// [batch, tokens] keep-mask -> [batch, 1, 1, tokens] additive mask.
at::Tensor additive_key_mask(const at::Tensor& key_mask, const at::Tensor& q) {
  return additive_mask(key_mask.to(q.device()).ne(0).unsqueeze(1).unsqueeze(2), q);
}

// [tokens, tokens] additive mask keeping i - window < j <= i
// (transformers' sliding-window causal mask).
at::Tensor sliding_window_mask(const at::Tensor& q, int64_t window) {
  const int64_t tokens = q.size(2);
  const at::Tensor band = at::ones({tokens, tokens}, q.options().dtype(at::kBool))
                              .tril(/*diagonal=*/0)
                              .triu(/*diagonal=*/-(window - 1));
  return additive_mask(band, q);
}

at::Tensor explicit_masked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& additive_mask,
                                     const AttentionOptions& options) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * scale;
  if (additive_mask.defined()) scores = scores + additive_mask;
  return at::matmul(drop_weights(at::softmax(scores, -1), options), v);
}

void check_attention_inputs(const char* what, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const AttentionOptions& options) {
  if (q.dim() != 4 || !q.sizes().equals(k.sizes()) || !q.sizes().equals(v.sizes())) {
    throw Error(std::string(what) +
                " expects q, k, v of one shape [batch, heads, tokens, head_dim], got " +
                shape_text(q) + ", " + shape_text(k) + ", " + shape_text(v));
  }
  if (options.dropout_p() < 0 || options.dropout_p() >= 1) {
    throw Error(std::string(what) + ": dropout_p must be in [0, 1), got " +
                std::to_string(options.dropout_p()));
  }
  if (options.sliding_window() < 0) {
    throw Error(std::string(what) + ": sliding_window must be 0 (none) or positive, got " +
                std::to_string(options.sliding_window()));
  }
  if (options.dropout_generator() && options.dropout_p() > 0 &&
      options.kernel() == AttentionKernel::kFused) {
    throw Error(std::string(what) +
                ": the fused kernel draws its own dropout mask; a dropout_generator needs the "
                "explicit kernel (kAuto or kExplicit)");
  }
}

// Up to these many tokens kAuto takes the explicit kernel on CPU even where
// LibTorch's fused one exists. Forward + backward of one GPT small layer's
// attention (16 x 6 heads, head_dim 64; bench/gpt/attention_bench on
// LibTorch 2.15, 2-core Intel VM, 2026-11-28), fused / blocked explicit, 1
// and 2 threads: 256 tokens float 1.29x / 1.18x, bfloat16 1.90x / 2.08x;
// 1024 tokens float 1.15x / 1.10x, bfloat16 1.20x / 1.29x. Beyond, the
// fused kernel keeps no tokens x tokens probabilities for backward (the
// explicit one keeps half of them). With dropout the explicit kernel is the
// unblocked one, faster than the fused kernel only in bfloat16 up to 256
// tokens.
constexpr int64_t kBlockedOnCpuUpToTokens = 1024;
constexpr int64_t kUnblockedBFloat16OnCpuUpToTokens = 256;

// causal: whether the explicit kernel is the causal one, with the fused
// softmax (the bidirectional one has none: kAuto keeps the fused kernel).
bool use_fused(const at::Tensor& q, const AttentionOptions& options, bool causal) {
  switch (options.kernel()) {
    case AttentionKernel::kFused:
      return true;
    case AttentionKernel::kExplicit:
      return false;
    case AttentionKernel::kAuto:
      break;
  }
  if (options.dropout_generator() && options.dropout_p() > 0) return false;
  if (!compat::has_fused_attention()) return false;
  if (!causal || !q.device().is_cpu()) return true;
  const int64_t tokens = q.size(2);
  if (explicit_causal_is_blocked(q, options.dropout_p())) {
    return tokens > kBlockedOnCpuUpToTokens;
  }
  return !(q.scalar_type() == at::kBFloat16 && tokens <= kUnblockedBFloat16OnCpuUpToTokens);
}

}  // namespace

bool fused_attention_available() { return compat::has_fused_attention(); }

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            AttentionOptions options) {
  check_attention_inputs("causal_attention", q, k, v, options);
  if (options.sliding_window() > 0 && options.sliding_window() < q.size(2)) {
    // A window shorter than the sequence: the band as an explicit mask (the
    // fused causal kernels know only the whole past).
    const at::Tensor band = sliding_window_mask(q, options.sliding_window());
    return use_fused(q, options, /*causal=*/false)
               ? compat::fused_masked_attention(q, k, v, band, options.dropout_p())
               : explicit_masked_attention(q, k, v, band, options);
  }
  return use_fused(q, options, /*causal=*/true)
             ? compat::fused_causal_attention(q, k, v, options.dropout_p())
             : explicit_causal_attention(q, k, v, options);
}

at::Tensor bidirectional_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& key_mask, AttentionOptions options) {
  check_attention_inputs("bidirectional_attention", q, k, v, options);
  if (options.sliding_window() != 0) {
    throw Error("bidirectional_attention: sliding_window is for causal_attention only");
  }
  at::Tensor additive;
  if (key_mask.defined()) {
    if (key_mask.dim() != 2 || key_mask.size(0) != q.size(0) || key_mask.size(1) != k.size(2)) {
      throw Error("bidirectional_attention: key_mask must be [batch, tokens] = [" +
                  std::to_string(q.size(0)) + ", " + std::to_string(k.size(2)) + "], got " +
                  shape_text(key_mask));
    }
    additive = additive_key_mask(key_mask, q);
  }
  return use_fused(q, options, /*causal=*/false)
             ? compat::fused_masked_attention(q, k, v, additive, options.dropout_p())
             : explicit_masked_attention(q, k, v, additive, options);
}

}  // namespace accelerate
