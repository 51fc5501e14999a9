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

#include <functional>

#include "accelerate/nn/cross_entropy.h"
#include "accelerate/nn/sequence_parallel.h"
#include "accelerate/nn/tensor_parallel.h"

namespace accelerate::models {

// logits [batch, tokens, vocab], labels [batch, tokens]. Throws
// accelerate::Error for other shapes.
at::Tensor causal_lm_loss(const at::Tensor& logits, const at::Tensor& labels);

// labels [batch, tokens] -> the labels position t predicts: labels[t + 1],
// and -100 (nothing) for the last position (transformers' shift_labels).
at::Tensor shift_causal_lm_labels(const at::Tensor& labels);

// The loss with labels already shifted: position t's logits predict
// shift_labels[t] (transformers' `shift_labels` argument; a dataset of
// windows and their next tokens yields them so).
at::Tensor shifted_causal_lm_loss(const at::Tensor& logits, const at::Tensor& shift_labels);

// A model's logits [batch, tokens, vocab] for input_ids [batch, tokens] at
// position_ids [tokens] (undefined: 0..tokens-1).
using CausalLMForward =
    std::function<at::Tensor(const at::Tensor& input_ids, const at::Tensor& position_ids)>;

// The cross-entropy of a model's logits ([rows, classes], targets [rows]):
// cross_entropy() when empty. A tensor-parallel model's forward gives its
// part of the vocabulary, and vocab_parallel_cross_entropy over it, so the
// logits are never whole on any process.
using TokenCrossEntropy = std::function<at::Tensor(
    const at::Tensor& logits, const at::Tensor& targets, const CrossEntropyOptions& options)>;
// The cross-entropy of a colwise head's logits, this rank's classes of a
// `vocabulary` split over `tp`: vocab_parallel_cross_entropy; empty (the
// plain one) for a group of one.
TokenCrossEntropy vocab_parallel_token_cross_entropy(int64_t vocabulary, const TensorParallel& tp);

// A decoder model's loss over a sequence-parallel group: every rank passes
// the whole batch, runs `forward` on its slice of the tokens (slice_tokens,
// at their positions) and gets the group's token mean
// (sequence_parallel_loss), equal to the unsplit loss up to rounding. The
// labels are shifted over the whole sequence before the split. A group of
// one: causal_lm_loss(forward(input_ids, {}), labels).
// `cross_entropy`: as above.
at::Tensor sequence_parallel_causal_lm_loss(const CausalLMForward& forward,
                                            const at::Tensor& input_ids, const at::Tensor& labels,
                                            const SequenceParallel& sp,
                                            const TokenCrossEntropy& cross_entropy = {});
// The same with labels already shifted (shifted_causal_lm_loss's).
at::Tensor sequence_parallel_shifted_causal_lm_loss(const CausalLMForward& forward,
                                                    const at::Tensor& input_ids,
                                                    const at::Tensor& shift_labels,
                                                    const SequenceParallel& sp,
                                                    const TokenCrossEntropy& cross_entropy = {});

}  // namespace accelerate::models
