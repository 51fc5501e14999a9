// Which autograd nodes a backward pass from some outputs can run.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/function.h>

#include <unordered_set>
#include <vector>

namespace accelerate {
namespace detail {

// Every node reachable from the outputs' grad_fn (or, for an output that is
// itself a leaf, its gradient accumulator): the gradient accumulators in this
// set are the only ones a backward from `outputs` may call.
std::unordered_set<const torch::autograd::Node*> nodes_reachable_from(
    const std::vector<at::Tensor>& outputs);

}  // namespace detail
}  // namespace accelerate
