#include "accelerate/attention.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <string>

#include "accelerate/errors.h"
#include "compat/attention_compat.h"

namespace accelerate {
namespace {

std::string shape_text(const at::Tensor& t) {
  std::string text = "[";
  for (int64_t i = 0; i < t.dim(); ++i) text += (i ? ", " : "") + std::to_string(t.size(i));
  return text + "]";
}

at::Tensor explicit_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     double dropout_p) {
  const int64_t tokens = q.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * scale;
  const at::Tensor future =
      at::ones({tokens, tokens}, q.options().dtype(at::kBool)).triu(/*diagonal=*/1);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  at::Tensor weights = at::softmax(scores, -1);
  if (dropout_p > 0) weights = at::dropout(weights, dropout_p, /*train=*/true);
  return at::matmul(weights, v);
}

}  // namespace

bool fused_attention_available() { return compat::has_fused_attention(); }

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            AttentionOptions options) {
  if (q.dim() != 4 || !q.sizes().equals(k.sizes()) || !q.sizes().equals(v.sizes())) {
    throw Error(
        "causal_attention expects q, k, v of one shape [batch, heads, tokens, head_dim], got " +
        shape_text(q) + ", " + shape_text(k) + ", " + shape_text(v));
  }
  if (options.dropout_p() < 0 || options.dropout_p() >= 1) {
    throw Error("causal_attention: dropout_p must be in [0, 1), got " +
                std::to_string(options.dropout_p()));
  }
  const bool fused = options.kernel() == AttentionKernel::kFused ||
                     (options.kernel() == AttentionKernel::kAuto && compat::has_fused_attention());
  return fused ? compat::fused_causal_attention(q, k, v, options.dropout_p())
               : explicit_causal_attention(q, k, v, options.dropout_p());
}

}  // namespace accelerate
