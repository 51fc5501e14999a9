#include "distributed/rank_ordered_sum.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include <c10/util/Half.h>

namespace accelerate {
namespace detail {
namespace {

// Floats add natively; half adds through float and rounds each step (as
// Gloo's float16 sum does); integers wrap instead of overflowing.
template <class T>
T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else if constexpr (std::is_same_v<T, c10::Half>) {
    return c10::Half(static_cast<float>(a) + static_cast<float>(b));
  } else {
    return a + b;
  }
}

// A block at a time into a local buffer (L1-sized), because the outputs may
// be inputs too.
template <class T>
void sum_of(const std::vector<const char*>& sources, std::int64_t count, char* also, char* out) {
  constexpr std::int64_t kBlock = 2048;
  T block[kBlock];
  std::vector<const T*> inputs;
  for (const char* source : sources) inputs.push_back(reinterpret_cast<const T*>(source));
  for (std::int64_t start = 0; start < count; start += kBlock) {
    const std::int64_t n = std::min(kBlock, count - start);
    const T* a = inputs[0] + start;
    const T* b = inputs[1] + start;
    for (std::int64_t i = 0; i < n; ++i) block[i] = add(a[i], b[i]);
    for (std::size_t r = 2; r < inputs.size(); ++r) {
      const T* next = inputs[r] + start;
      for (std::int64_t i = 0; i < n; ++i) block[i] = add(block[i], next[i]);
    }
    const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(T);
    if (also != nullptr) std::memcpy(also + start * sizeof(T), block, bytes);
    std::memcpy(out + start * sizeof(T), block, bytes);
  }
}

}  // namespace

bool sums_in_rank_order(at::ScalarType dtype) {
  return dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf || dtype == at::kInt ||
         dtype == at::kLong;
}

void sum_in_rank_order(at::ScalarType dtype, const std::vector<const char*>& sources,
                       std::int64_t count, char* also, char* out) {
  if (sources.size() < 2) throw std::logic_error("sum_in_rank_order needs two sources or more");
  switch (dtype) {
    case at::kFloat:
      return sum_of<float>(sources, count, also, out);
    case at::kDouble:
      return sum_of<double>(sources, count, also, out);
    case at::kHalf:
      return sum_of<c10::Half>(sources, count, also, out);
    case at::kInt:
      return sum_of<std::int32_t>(sources, count, also, out);
    case at::kLong:
      return sum_of<std::int64_t>(sources, count, also, out);
    default:
      throw std::logic_error("sum_in_rank_order: unserved dtype");
  }
}

}  // namespace detail
}  // namespace accelerate
