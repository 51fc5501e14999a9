// Where a tensor-parallel part lies in its whole, asked of a parameter:
// what the engines' checkpoint items need of the model's split layers
// without knowing them. Internal.
#pragma once

#include <functional>

#include <ATen/core/Tensor.h>

namespace accelerate {

struct TensorParallelPart;

// The layout of `parameter` when it is a tensor-parallel part, else null.
using FindTensorParallelPart =
    std::function<const TensorParallelPart*(const at::Tensor& parameter)>;

}  // namespace accelerate
