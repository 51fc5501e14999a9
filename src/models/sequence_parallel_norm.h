// A LayerNorm between tensor-parallel layers. Under Megatron's sequence
// parallelism each rank normalises its own tokens, so its weight and bias
// gradients are its tokens' part of the whole: copy_to_tensor_parallel sums
// them over the group, and every rank steps the replicated parameters
// alike. Otherwise the module as it is.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/modules/normalization.h>

#include "accelerate/nn/tensor_parallel.h"

namespace accelerate::models {

inline at::Tensor layer_norm_between_layers(torch::nn::LayerNorm& norm, const at::Tensor& x,
                                            const TensorParallel& tp) {
  if (!tp.sequence_parallel()) return norm(x);
  auto summed = [&tp](const at::Tensor& p) {
    return p.defined() ? copy_to_tensor_parallel(p, tp) : p;  // elementwise_affine(false): none
  };
  return at::layer_norm(x, norm->options.normalized_shape(), summed(norm->weight),
                        summed(norm->bias), norm->options.eps());
}

}  // namespace accelerate::models
