// causal_lm_loss (include/accelerate/models/causal_lm_loss.h).
#include "accelerate/models/causal_lm_loss.h"

#include <ATen/ATen.h>

#include "accelerate/cross_entropy.h"
#include "accelerate/errors.h"

namespace accelerate::models {

at::Tensor causal_lm_loss(const at::Tensor& logits, const at::Tensor& labels) {
  if (logits.dim() != 3 || labels.sizes() != logits.sizes().slice(0, 2)) {
    throw Error("causal_lm_loss: logits " + c10::str(logits.sizes()) + " and labels " +
                c10::str(labels.sizes()) +
                " do not match ([batch, tokens, vocab], [batch, tokens])");
  }
  // Position t predicts labels[t + 1]; the last position predicts nothing.
  const at::Tensor shifted =
      at::constant_pad_nd(labels.narrow(1, 1, labels.size(1) - 1), {0, 1}, -100);
  return cross_entropy(logits.reshape({-1, logits.size(-1)}), shifted.reshape({-1}),
                       CrossEntropyOptions().ignore_index(-100));
}

}  // namespace accelerate::models
