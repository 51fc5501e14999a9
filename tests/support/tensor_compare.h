// Comparisons, seeded draws and parts of whole tensors the tensor-parallel
// tests share.
#pragma once

#include <torch/torch.h>

#include <gtest/gtest.h>

#include "accelerate/nn/tensor_parallel.h"

#include <cstdint>
#include <vector>

namespace accelerate::testing {

// max |a - b| / max |b| over the whole tensor (1 for shapes that differ,
// reported as a failure).
inline double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (!a.sizes().equals(b.sizes())) return 1.0;
  const double scale = b.abs().max().item<double>();
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>() /
         (scale > 0 ? scale : 1.0);
}

// Every rank draws the same tensors from a generator of its own (rank
// threads share the default one).
struct Draws {
  explicit Draws(uint64_t seed) : generator(at::detail::createCPUGenerator(seed)) {}
  torch::Tensor operator()(std::vector<int64_t> shape) { return at::randn(shape, generator); }
  at::Generator generator;
};

// This rank's part of `whole` shaped as `part`: along each dimension where
// they differ, the rank's tensor_parallel_range (one block: not for fused
// layers, whose tests write their blocks out).
inline torch::Tensor tensor_parallel_part_of(const torch::Tensor& whole, const torch::Tensor& part,
                                             const TensorParallel& tp) {
  torch::Tensor slice = whole;
  for (int64_t d = 0; d < whole.dim(); ++d) {
    if (whole.size(d) == part.size(d)) continue;
    const auto range = tensor_parallel_range(whole.size(d), tp);
    slice = slice.narrow(d, range.start, range.length);
  }
  return slice;
}

}  // namespace accelerate::testing
