#include "text/truncation.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "accelerate/common/errors.h"

namespace accelerate {

const char* to_string(TruncationStrategy strategy) {
  switch (strategy) {
    case TruncationStrategy::kLongestFirst:
      return "longest_first";
    case TruncationStrategy::kOnlyFirst:
      return "only_first";
    case TruncationStrategy::kOnlySecond:
      return "only_second";
  }
  return "?";
}

namespace detail {
namespace {

// longest_first on a pair: the shorter sequence is kept whole when the
// longer one can absorb the cut; otherwise both get half the room, the
// first sequence in the order (shorter, longer) rounding down.
void truncate_longest_first(std::vector<int32_t>& first, std::vector<int32_t>& second,
                            size_t room) {
  size_t shorter = first.size(), longer = second.size();
  const bool swapped = shorter > longer;
  if (swapped) std::swap(shorter, longer);
  longer = shorter > room ? shorter : std::max(shorter, room - shorter);
  if (shorter + longer > room) {
    shorter = room / 2;
    longer = shorter + room % 2;
  }
  if (swapped) std::swap(shorter, longer);
  first.resize(std::min(first.size(), shorter));
  second.resize(std::min(second.size(), longer));
}

}  // namespace

size_t tokenize_limit(const TruncationOptions& options, int sequence) {
  if (options.strategy() == TruncationStrategy::kOnlySecond && sequence == 0) {
    return std::numeric_limits<size_t>::max();
  }
  return options.max_length();
}

void truncate_sequences(std::vector<int32_t>& first, std::vector<int32_t>* second,
                        size_t special_tokens, const TruncationOptions& options) {
  const std::string what = std::string("truncation ") + to_string(options.strategy()) + ": ";
  if (options.max_length() < special_tokens) {
    throw Error(what + "max_length " + std::to_string(options.max_length()) +
                " leaves no room for the " + std::to_string(special_tokens) +
                " special tokens the post-processor adds");
  }
  const size_t room = options.max_length() - special_tokens;
  if (room == 0) {  // tokenizers' special case: both emptied, whatever the strategy
    first.clear();
    if (second) second->clear();
    return;
  }
  const size_t total = first.size() + (second ? second->size() : 0);
  if (total <= room) return;
  const size_t excess = total - room;
  if (options.strategy() == TruncationStrategy::kLongestFirst) {
    if (second) {
      truncate_longest_first(first, *second, room);
    } else {
      first.resize(room);
    }
    return;
  }
  const bool only_first = options.strategy() == TruncationStrategy::kOnlyFirst;
  if (!only_first && !second) throw Error(what + "there is no second sequence to truncate");
  std::vector<int32_t>& target = only_first ? first : *second;
  if (target.size() <= excess) {
    throw Error(what + "the " + (only_first ? "first" : "second") + " sequence's " +
                std::to_string(target.size()) + " tokens cannot lose the " +
                std::to_string(excess) + " that max_length " +
                std::to_string(options.max_length()) + " requires");
  }
  target.resize(target.size() - excess);
}

}  // namespace detail
}  // namespace accelerate
