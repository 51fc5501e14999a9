// Dropout with a mask drawn from a given generator, as at::dropout computes
// it from the default one: x * bernoulli(1 - p) / (1 - p).
#pragma once

#include <ATen/ATen.h>

namespace accelerate::detail {

inline at::Tensor dropout_from(const at::Tensor& x, double p, const at::Generator& generator) {
  if (p == 0) return x;
  return x * at::empty_like(x).bernoulli_(1 - p, generator).div_(1 - p);
}

}  // namespace accelerate::detail
