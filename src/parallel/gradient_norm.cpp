#include "parallel/gradient_norm.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>

namespace accelerate {

GradientNormParts::GradientNormParts(double norm_type)
    : norm_type_(norm_type), sums_(at::zeros({2}, at::kDouble)) {}

bool GradientNormParts::infinity() const { return std::isinf(norm_type_); }

void GradientNormParts::add(const at::Tensor& gradient, bool tensor_parallel_part) {
  at::NoGradGuard no_grad;
  if (gradient.numel() == 0) return;
  at::Tensor sum = sums_.narrow(0, tensor_parallel_part ? 0 : 1, 1);
  const at::Tensor magnitude = gradient.to(at::kDouble).abs();
  if (infinity()) {
    sum.copy_(at::maximum(sum, magnitude.max().reshape({1}).cpu()));
  } else {
    sum.add_(magnitude.pow(norm_type_).sum().reshape({1}).cpu());
  }
}

void GradientNormParts::combine(Communicator& group) {
  group.all_reduce(sums_, infinity() ? ReduceOp::kMax : ReduceOp::kSum);
}

void GradientNormParts::combine_parts(Communicator& group) {
  at::Tensor parts = sums_.narrow(0, 0, 1).clone();
  group.all_reduce(parts, infinity() ? ReduceOp::kMax : ReduceOp::kSum);
  sums_.narrow(0, 0, 1).copy_(parts);
}

double GradientNormParts::norm() const {
  const double parts = sums_[0].item<double>(), whole = sums_[1].item<double>();
  if (infinity()) return std::max(parts, whole);
  return std::pow(parts + whole, 1.0 / norm_type_);
}

std::optional<double> clip_coefficient(double norm, double max_norm) {
  const double coefficient = max_norm / (norm + 1e-6);
  if (coefficient < 1.0) return coefficient;
  return std::nullopt;
}

}  // namespace accelerate
