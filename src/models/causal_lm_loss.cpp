// causal_lm_loss (include/accelerate/models/causal_lm_loss.h).
#include "accelerate/models/causal_lm_loss.h"

#include <ATen/ATen.h>

#include "accelerate/cross_entropy.h"
#include "accelerate/errors.h"

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
                        LossReduction reduction) {
  return cross_entropy(logits.reshape({-1, logits.size(-1)}), shift_labels.reshape({-1}),
                       CrossEntropyOptions().ignore_index(kIgnoredLabel).reduction(reduction));
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

at::Tensor sequence_parallel_causal_lm_loss(const CausalLMForward& forward,
                                            const at::Tensor& input_ids, const at::Tensor& labels,
                                            const SequenceParallel& sp) {
  if (!sp.enabled()) return causal_lm_loss(forward(input_ids, {}), labels);
  if (!input_ids.sizes().equals(labels.sizes())) {
    throw Error("sequence_parallel_causal_lm_loss: input_ids " + c10::str(input_ids.sizes()) +
                " and labels " + c10::str(labels.sizes()) + " differ in shape");
  }
  return sequence_parallel_shifted_causal_lm_loss(forward, input_ids,
                                                  shift_causal_lm_labels(labels), sp);
}

at::Tensor sequence_parallel_shifted_causal_lm_loss(const CausalLMForward& forward,
                                                    const at::Tensor& input_ids,
                                                    const at::Tensor& shift_labels,
                                                    const SequenceParallel& sp) {
  if (!sp.enabled()) return shifted_causal_lm_loss(forward(input_ids, {}), shift_labels);
  if (!input_ids.sizes().equals(shift_labels.sizes())) {
    throw Error("sequence_parallel_shifted_causal_lm_loss: input_ids " +
                c10::str(input_ids.sizes()) + " and labels " + c10::str(shift_labels.sizes()) +
                " differ in shape");
  }
  // Both are aligned already (labels shifted over the whole sequence), so
  // each rank takes the same columns of both.
  const at::Tensor my_ids = slice_tokens(input_ids, sp);
  const at::Tensor my_labels = slice_tokens(shift_labels, sp);
  const int64_t first = sp.rank() * my_ids.size(1);
  const at::Tensor positions =
      at::arange(first, first + my_ids.size(1), input_ids.options().dtype(at::kLong));
  const at::Tensor logits = forward(my_ids, positions);
  require_matching(logits, my_labels, "sequence_parallel_shifted_causal_lm_loss");
  return sequence_parallel_loss(token_losses(logits, my_labels, LossReduction::kSum),
                                (my_labels != kIgnoredLabel).sum(), sp);
}

}  // namespace accelerate::models
