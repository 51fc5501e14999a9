// causal_lm_loss (include/accelerate/models/causal_lm_loss.h).
#include "accelerate/models/causal_lm_loss.h"

#include <ATen/ATen.h>

#include "accelerate/common/errors.h"
#include "accelerate/nn/cross_entropy.h"
#include "accelerate/nn/parallel_layers.h"

namespace accelerate::models {
namespace {

constexpr int64_t kIgnoredLabel = -100;  // transformers' ignore_index

void require_matching(const at::Tensor& logits, const at::Tensor& labels, const char* what) {
  if (logits.dim() != 3 || labels.sizes() != logits.sizes().slice(0, 2)) {
    throw Error(std::string(what) + ": logits " + c10::str(logits.sizes()) + " and labels " +
                c10::str(labels.sizes()) +
                " do not match ([batch, tokens, vocab], [batch, tokens])");
  }
}

at::Tensor token_losses(const at::Tensor& logits, const at::Tensor& shift_labels,
                        LossReduction reduction, const TokenCrossEntropy& cross_entropy = {}) {
  const auto options = CrossEntropyOptions().ignore_index(kIgnoredLabel).reduction(reduction);
  const at::Tensor rows = logits.reshape({-1, logits.size(-1)});
  if (cross_entropy) return cross_entropy(rows, shift_labels.reshape({-1}), options);
  return accelerate::cross_entropy(rows, shift_labels.reshape({-1}), options);
}

}  // namespace

at::Tensor shift_causal_lm_labels(const at::Tensor& labels) {
  if (labels.dim() != 2) {
    throw Error("shift_causal_lm_labels: labels must be [batch, tokens], not " +
                c10::str(labels.sizes()));
  }
  return at::constant_pad_nd(labels.narrow(1, 1, labels.size(1) - 1), {0, 1}, kIgnoredLabel);
}

at::Tensor causal_lm_loss(const at::Tensor& logits, const at::Tensor& labels) {
  require_matching(logits, labels, "causal_lm_loss");
  return token_losses(logits, shift_causal_lm_labels(labels), LossReduction::kMean);
}

at::Tensor shifted_causal_lm_loss(const at::Tensor& logits, const at::Tensor& shift_labels) {
  require_matching(logits, shift_labels, "shifted_causal_lm_loss");
  return token_losses(logits, shift_labels, LossReduction::kMean);
}

namespace {

// The group's token mean from this rank's slice: its ids at their
// positions, and the labels those positions predict.
at::Tensor slice_loss(const CausalLMForward& forward, const at::Tensor& my_ids,
                      const at::Tensor& my_labels, const at::Tensor& positions,
                      const SequenceParallel& sp, const TokenCrossEntropy& cross_entropy) {
  const at::Tensor logits = forward(my_ids, positions);
  require_matching(logits, my_labels, "sequence_parallel_causal_lm_loss");
  return sequence_parallel_loss(token_losses(logits, my_labels, LossReduction::kSum, cross_entropy),
                                (my_labels != kIgnoredLabel).sum(), sp);
}

void require_same_shape(const at::Tensor& input_ids, const at::Tensor& labels) {
  if (!input_ids.sizes().equals(labels.sizes())) {
    throw Error("sequence_parallel_causal_lm_loss: input_ids " + c10::str(input_ids.sizes()) +
                " and labels " + c10::str(labels.sizes()) + " differ in shape");
  }
}

}  // namespace

at::Tensor sequence_parallel_causal_lm_loss(const CausalLMForward& forward,
                                            const at::Tensor& input_ids, const at::Tensor& labels,
                                            const SequenceParallel& sp,
                                            const TokenCrossEntropy& cross_entropy) {
  if (!sp.enabled()) {
    const at::Tensor logits = forward(input_ids, {});
    require_matching(logits, labels, "causal_lm_loss");
    return token_losses(logits, shift_causal_lm_labels(labels), LossReduction::kMean,
                        cross_entropy);
  }
  require_same_shape(input_ids, labels);
  // slice_sequence shifts the labels over the whole sequence, then splits.
  const SequenceSlice slice = slice_sequence(input_ids, sp, labels, kIgnoredLabel);
  return slice_loss(forward, slice.input_ids, slice.labels, slice.position_ids, sp, cross_entropy);
}

at::Tensor sequence_parallel_shifted_causal_lm_loss(const CausalLMForward& forward,
                                                    const at::Tensor& input_ids,
                                                    const at::Tensor& shift_labels,
                                                    const SequenceParallel& sp,
                                                    const TokenCrossEntropy& cross_entropy) {
  if (!sp.enabled()) {
    const at::Tensor logits = forward(input_ids, {});
    require_matching(logits, shift_labels, "shifted_causal_lm_loss");
    return token_losses(logits, shift_labels, LossReduction::kMean, cross_entropy);
  }
  require_same_shape(input_ids, shift_labels);
  // Both are aligned already, so each rank takes the same columns of both.
  const at::Tensor my_ids = slice_tokens(input_ids, sp);
  const int64_t first = sp.rank() * my_ids.size(1);
  return slice_loss(forward, my_ids, slice_tokens(shift_labels, sp),
                    at::arange(first, first + my_ids.size(1), input_ids.options().dtype(at::kLong)),
                    sp, cross_entropy);
}

TokenCrossEntropy vocab_parallel_token_cross_entropy(int64_t vocabulary, const TensorParallel& tp) {
  if (!tp.enabled()) return {};
  return [tp, vocabulary](const at::Tensor& logits, const at::Tensor& targets,
                          const CrossEntropyOptions& options) {
    return vocab_parallel_cross_entropy(logits, targets, vocabulary, tp, options);
  };
}

}  // namespace accelerate::models
