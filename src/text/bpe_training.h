// The BPE training algorithm behind BpeTokenizer::train.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace accelerate::detail {

// Learns up to `max_merges` merges from the pre-split pieces of `texts`.
// Merge i makes token 256 + i. Each step merges the pair with the highest
// count over all pieces (weighted by how often each piece occurs); among
// equal counts, the smallest (left id, right id) wins, so the result depends
// on the input alone. Stops early when the best count is below
// `min_pair_count`.
std::vector<std::pair<int32_t, int32_t>> learn_bpe_merges(
    const std::vector<std::string_view>& texts, int32_t max_merges, int64_t min_pair_count);

}  // namespace accelerate::detail
