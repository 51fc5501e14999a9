// The order in which an epoch visits a map-style dataset, and the shuffle
// seed a loader starts with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace accelerate {
namespace detail {

// 0..length-1, or with `shuffle` the permutation LibTorch's randperm draws
// from a CPU generator seeded with seed + epoch (what Accelerate's
// SeedableRandomSampler does), identical on every process.
std::vector<size_t> epoch_order(size_t length, bool shuffle, uint64_t seed, int64_t epoch);

// A seed drawn from LibTorch's default CPU generator, so that
// torch::manual_seed makes it reproducible.
uint64_t draw_seed_from_default_generator();

}  // namespace detail
}  // namespace accelerate
