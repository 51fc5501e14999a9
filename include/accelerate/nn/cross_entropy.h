// Softmax cross-entropy of class logits, in float whatever the logits'
// type, on a fused CPU kernel of the library's own.
//
//   // logits [rows, classes] (float or bfloat16), targets [rows] (int64)
//   auto loss = accelerate::cross_entropy(logits, targets);               // mean
//   auto sum = accelerate::cross_entropy(logits, targets,
//       accelerate::CrossEntropyOptions().reduction(accelerate::LossReduction::kSum));
//
// The value is torch::nn::functional::cross_entropy(logits.to(kFloat),
// targets, ...) to float rounding. The usual way materialises the logits in
// float, then their log-softmax, and in backward both again: for a language
// model's head (rows = batch x tokens, classes = the vocabulary) those are
// the largest tensors of the step, and with bfloat16 logits the casts and
// the two softmax passes cost more than the head's matmul's share of the
// step's other elementwise work (docs/gpt-performance.md). On CPU float
// and bfloat16 logits this reads them twice in forward (row maximum, sum of
// exponentials), keeps one float per row, and writes the gradient once, in
// the logits' type. Elsewhere (CUDA, other types) it is LibTorch's
// cross_entropy on the logits cast to float.
#pragma once

#include <ATen/core/Tensor.h>

#include "accelerate/common/arg.h"

namespace accelerate {

enum class LossReduction {
  kMean,  // over the rows whose target is not ignore_index (NaN if there are none)
  kSum,   // over all rows (ignored ones add 0)
  kNone,  // one loss per row, 0 where ignored
};

struct CrossEntropyOptions {
  // Rows with this target add nothing to the loss or the gradient.
  ACCELERATE_ARG(int64_t, ignore_index) = -100;
  ACCELERATE_ARG(LossReduction, reduction) = LossReduction::kMean;
};

// The cross-entropy of logits [rows, classes] against targets [rows], a
// float scalar (kMean, kSum) or [rows] (kNone); differentiable in logits.
// Throws accelerate::Error for other shapes, non-integer targets, or a
// target outside [0, classes) that is not ignore_index.
at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets,
                         CrossEntropyOptions options = {});

}  // namespace accelerate
