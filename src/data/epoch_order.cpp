#include "data/epoch_order.h"

#include <numeric>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

namespace accelerate {
namespace detail {

std::vector<size_t> epoch_order(size_t length, bool shuffle, uint64_t seed, int64_t epoch) {
  std::vector<size_t> order(length);
  if (!shuffle) {
    std::iota(order.begin(), order.end(), size_t{0});
    return order;
  }
  // Unsigned arithmetic: seed + epoch wraps instead of overflowing.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed + static_cast<uint64_t>(epoch));
  at::Tensor permutation =
      at::randperm(static_cast<int64_t>(length), generator, at::TensorOptions().dtype(at::kLong));
  const int64_t* values = permutation.data_ptr<int64_t>();
  for (size_t i = 0; i < length; ++i) order[i] = static_cast<size_t>(values[i]);
  return order;
}

uint64_t draw_seed_from_default_generator() {
  // Drawing through a tensor op takes the generator's lock for us.
  return static_cast<uint64_t>(at::empty({}, at::kLong).random_().item<int64_t>());
}

}  // namespace detail
}  // namespace accelerate
