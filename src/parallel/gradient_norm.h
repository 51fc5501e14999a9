// The pieces a global gradient norm is made of, for clipping across every
// dimension of the device mesh. Under tensor parallelism each rank of a
// group holds a different part of a split parameter but the same whole
// norm weights and replicated layers: the norm sums the parts over the
// group and counts each whole parameter once, where summing everything
// over the group would count the replicated ones tp times (the classic
// tensor-parallel clipping bug). Internal.
#pragma once

#include <functional>
#include <optional>

#include <ATen/core/Tensor.h>

#include "accelerate/distributed/communicator.h"

namespace accelerate {

// Whether a parameter is a tensor-parallel part (accelerate::tensor_parallel_parts).
using IsTensorParallelPart = std::function<bool(const at::Tensor& parameter)>;

// sum |g|^p (the max |g| for p = inf) of gradients, tensor-parallel parts
// apart from whole parameters, accumulated in double.
class GradientNormParts {
 public:
  explicit GradientNormParts(double norm_type);

  // `gradient` (any shape; a piece of one parameter's gradient, or all of it).
  void add(const at::Tensor& gradient, bool tensor_parallel_part);
  // Over `group`, whose processes hold other elements of the same
  // gradients (ZeRO's shards): both sums combined, in one all-reduce.
  void combine(Communicator& group);
  // Over a tensor-parallel group: the parts combined; the whole
  // parameters' sums stay, being the same on every process of the group.
  void combine_parts(Communicator& group);
  // The norm: (parts + whole)^(1/p), or the larger max at p = inf.
  double norm() const;

 private:
  bool infinity() const;
  double norm_type_;
  at::Tensor sums_;  // [2] double on the CPU: the parts', the whole parameters'
};

// clip_grad_norm_'s factor for a gradient norm `norm` and `max_norm`, as
// PyTorch's: max_norm / (norm + 1e-6), when that is below 1 (else nothing
// to scale).
std::optional<double> clip_coefficient(double norm, double max_norm);

}  // namespace accelerate
