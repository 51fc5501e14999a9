// What each rank adds in the collective tests, and the sums they must reach:
// values that make the order of additions visible in floating point (mixed
// signs and magnitudes) and that wrap in integers.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

namespace accelerate {
namespace testing {

// Rank r's contribution of `numel` elements.
inline at::Tensor contribution(int rank, int64_t numel, at::ScalarType dtype) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 + rank);
  if (at::isFloatingType(dtype)) {
    auto values = at::randn({numel}, generator, at::kDouble) *
                  at::pow(10.0, at::randint(-3, 4, {numel}, generator, at::kDouble));
    return values.to(dtype);
  }
  const int64_t high = dtype == at::kInt ? (int64_t{1} << 31) - 1 : int64_t{1} << 62;
  return at::randint(-high, high, {numel}, generator, dtype);
}

// What every rank must hold after a sum: contributions added in rank order,
// one add at a time in the tensor's own dtype.
inline at::Tensor rank_ordered_sum(int world, int64_t numel, at::ScalarType dtype) {
  at::Tensor sum = contribution(0, numel, dtype);
  for (int r = 1; r < world; ++r) sum = sum + contribution(r, numel, dtype);
  return sum;
}

}  // namespace testing
}  // namespace accelerate
