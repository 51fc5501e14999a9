// What the splittable Linear layers share (ParallelLinear, and GPT-2's
// Conv1D, whose weights are stored [in, out]): the checks before a split
// and the forward of a split layer, on a weight seen as a Linear's
// [out, in] (Conv1D passes its weight transposed, a view).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "accelerate/nn/parallel_layers.h"

namespace accelerate::detail {

// "ParallelLinear (colwise, tp 2)", as the messages name a layer.
std::string split_layer_name(const char* layer, TensorParallelStyle style,
                             const TensorParallel& tp);
// Error (one line) unless every rank can hold at least one of `total` rows.
void require_splittable(int64_t total, const char* what, const std::string& layer,
                        const TensorParallel& tp);

struct LinearSplit {
  const char* layer;  // the layer's name in messages: "ParallelLinear"
  TensorParallelStyle style = TensorParallelStyle::kReplicate;
  TensorParallel tp;
  bool sequence_parallel = false;
  int64_t in_features = 0;
  int64_t out_features = 0;
  // Equal blocks of the output split alike (TensorParallelPart::blocks).
  int64_t output_blocks = 1;

  // Whether the style splits anything in this group.
  bool splits() const { return tp.enabled() && style != TensorParallelStyle::kReplicate; }
  std::string name() const { return split_layer_name(layer, style, tp); }
};

// Errors (one line, alike on every rank) for a split `to` cannot be:
// `current` split already; fewer features than ranks; colwise_rep of an
// output tp does not divide or of blocks (gathering would interleave them).
void check_linear_split(const LinearSplit& current, const LinearSplit& to);

// The forward of a split layer by style (ParallelLinearImpl::forward's
// contract): `weight` [out part, in] colwise, [out, in part] rowwise.
at::Tensor split_linear_forward(const at::Tensor& x, const at::Tensor& weight,
                                const at::Tensor& bias, const LinearSplit& split);

// Colwise products of x under Megatron's sequence parallelism: x is this
// rank's tokens [batch, tokens / tp, in]; each product is
// linear(every rank's tokens gathered, weights[i], biases[i]) (a bias may be
// undefined), one gather forward for all; backward gathers x again (only x
// is kept, not the gathered input) and reduce-scatters x's gradient summed
// over the products. In tensor_parallel.cpp, beside the collectives.
std::vector<at::Tensor> sequence_parallel_colwise_products(const at::Tensor& x,
                                                           const std::vector<at::Tensor>& weights,
                                                           const std::vector<at::Tensor>& biases,
                                                           const TensorParallel& tp);
// Error (one line, naming the layer) unless x has the layer's input features.
void require_input_width(const at::Tensor& x, const LinearSplit& split);

}  // namespace accelerate::detail
