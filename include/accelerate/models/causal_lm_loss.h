// transformers' causal language-model loss (ForCausalLMLoss), shared by the
// decoder models (LlamaForCausalLM, GPT2LMHeadModel):
//
//   auto loss = accelerate::models::causal_lm_loss(logits, input_ids);
//
// Position t's logits predict labels[t + 1] (the labels are shifted here,
// so labels = input_ids for language modelling); labels of -100 are ignored;
// the mean of the rest, computed in fp32.
#pragma once

#include <ATen/core/Tensor.h>

namespace accelerate::models {

// logits [batch, tokens, vocab], labels [batch, tokens]. Throws
// accelerate::Error for other shapes.
at::Tensor causal_lm_loss(const at::Tensor& logits, const at::Tensor& labels);

}  // namespace accelerate::models
