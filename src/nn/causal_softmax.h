// Attention's causal softmax on the library's fused CPU kernel (internal to
// the nn area; accelerate::causal_attention's explicit kernel uses it).
#pragma once

#include <ATen/core/Tensor.h>

namespace accelerate {
namespace detail {

// Whether fused_causal_softmax takes these scores: CPU, float or bfloat16.
bool has_fused_causal_softmax(const at::Tensor& scores);

// softmax(scale * scores) over the last dimension with query i (dimension
// -2) seeing keys j <= i + keys - queries, 0 elsewhere; in float, returned in
// the scores' type; differentiable in scores. One pass over the scores
// replaces LibTorch's scale, mask, softmax (and, under bf16 autocast, the
// casts to float and back); backward saves only the probabilities.
at::Tensor fused_causal_softmax(const at::Tensor& scores, double scale);

// fused_causal_softmax's two passes without autograd, for kernels that keep
// the probabilities themselves: the probabilities of the scores, and the
// scores' gradient from the probabilities and their gradient.
at::Tensor causal_softmax_probs(const at::Tensor& scores, double scale);
// The same probabilities written into `probs`: contiguous, of the scores'
// shape and type (it may be the scores themselves).
void causal_softmax_probs_into(const at::Tensor& scores, double scale, const at::Tensor& probs);
at::Tensor causal_softmax_grad(const at::Tensor& probs, const at::Tensor& grad_probs, double scale);

}  // namespace detail
}  // namespace accelerate
