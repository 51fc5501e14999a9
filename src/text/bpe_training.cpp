#include "text/bpe_training.h"

#include <algorithm>
#include <optional>
#include <queue>
#include <unordered_map>

#include "text/pre_split.h"

namespace accelerate::detail {
namespace {

constexpr int32_t kByteTokens = 256;

// A pair of adjacent tokens as one number; ordering keys orders pairs by
// (left, right), which the tie-breaking rule relies on.
using PairKey = uint64_t;

PairKey key_of(int32_t left, int32_t right) {
  return (static_cast<PairKey>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}
int32_t left_of(PairKey key) { return static_cast<int32_t>(key >> 32); }
int32_t right_of(PairKey key) { return static_cast<int32_t>(key & 0xffffffffu); }

// A distinct piece of the training text, as its current tokens.
struct Word {
  std::vector<int32_t> tokens;
  int64_t count = 0;  // how often the piece occurs in the text
};

// An entry of the max-heap of pairs. Counts change as merges go; instead of
// updating entries, every change pushes a new one and entries whose count is
// no longer the pair's count are dropped when they reach the top.
struct Candidate {
  int64_t count;
  PairKey pair;
  // Higher count first; among equal counts, the smaller pair first.
  bool operator<(const Candidate& other) const {
    return count != other.count ? count < other.count : pair > other.pair;
  }
};

std::vector<Word> count_words(const std::vector<std::string_view>& texts) {
  std::unordered_map<std::string_view, int64_t> piece_counts;
  for (std::string_view text : texts) {
    for (size_t begin = 0, end = 0; begin < text.size(); begin = end) {
      end = next_piece_end(text, begin);
      ++piece_counts[text.substr(begin, end - begin)];
    }
  }
  std::vector<Word> words;
  for (const auto& [piece, count] : piece_counts) {
    if (piece.size() < 2) continue;  // no pair to merge
    Word word;
    word.tokens.assign(piece.begin(), piece.end());
    for (int32_t& token : word.tokens) token = static_cast<unsigned char>(token);
    word.count = count;
    words.push_back(std::move(word));
  }
  return words;
}

// Pair counts over all words, kept up to date merge by merge: a merge only
// revisits the words that contain its pair.
class PairStatistics {
 public:
  explicit PairStatistics(std::vector<Word> words) : words_(std::move(words)) {
    for (int32_t w = 0; w < static_cast<int32_t>(words_.size()); ++w) {
      const Word& word = words_[w];
      for (size_t i = 0; i + 1 < word.tokens.size(); ++i) {
        const PairKey pair = key_of(word.tokens[i], word.tokens[i + 1]);
        counts_[pair] += word.count;
        words_with_pair_[pair].push_back(w);
      }
    }
    for (const auto& [pair, count] : counts_) candidates_.push({count, pair});
  }

  // The pair to merge next, or nullopt when no pair is left.
  std::optional<Candidate> best() {
    while (!candidates_.empty()) {
      const Candidate top = candidates_.top();
      const auto current = counts_.find(top.pair);
      if (current != counts_.end() && current->second == top.count) return top;
      candidates_.pop();
    }
    return std::nullopt;
  }

  // Replaces every occurrence of `pair` (left to right, not overlapping) by
  // `new_token` and updates the counts of the pairs that changed.
  void merge(PairKey pair, int32_t new_token) {
    auto node = words_with_pair_.extract(pair);
    if (node.empty()) return;  // not reached: a pair with a count is in some word
    std::vector<int32_t>& word_ids = node.mapped();
    // A word appears once per time it gained the pair: visit it once.
    std::sort(word_ids.begin(), word_ids.end());
    word_ids.erase(std::unique(word_ids.begin(), word_ids.end()), word_ids.end());
    deltas_.clear();
    for (int32_t w : word_ids) merge_in_word(w, left_of(pair), right_of(pair), new_token);
    apply_deltas();
  }

 private:
  void merge_in_word(int32_t w, int32_t left, int32_t right, int32_t new_token) {
    Word& word = words_[w];
    const std::vector<int32_t>& old_tokens = word.tokens;
    std::vector<int32_t> new_tokens;
    new_tokens.reserve(old_tokens.size());
    for (size_t i = 0; i < old_tokens.size(); ++i) {
      const bool match =
          i + 1 < old_tokens.size() && old_tokens[i] == left && old_tokens[i + 1] == right;
      new_tokens.push_back(match ? new_token : old_tokens[i]);
      i += match ? 1 : 0;
    }
    if (new_tokens.size() == old_tokens.size()) return;  // listed for a pair it lost since
    // Take out all the word's old pairs and put in all its new ones; the
    // pairs the merge did not touch cancel out in apply_deltas.
    for (size_t i = 0; i + 1 < old_tokens.size(); ++i) {
      deltas_.emplace_back(key_of(old_tokens[i], old_tokens[i + 1]), -word.count);
    }
    for (size_t i = 0; i + 1 < new_tokens.size(); ++i) {
      const PairKey new_pair = key_of(new_tokens[i], new_tokens[i + 1]);
      deltas_.emplace_back(new_pair, word.count);
      if (new_tokens[i] == new_token || new_tokens[i + 1] == new_token) {
        words_with_pair_[new_pair].push_back(w);
      }
    }
    word.tokens = std::move(new_tokens);
  }

  void apply_deltas() {
    std::sort(deltas_.begin(), deltas_.end());
    for (size_t i = 0; i < deltas_.size();) {
      const PairKey pair = deltas_[i].first;
      int64_t delta = 0;
      for (; i < deltas_.size() && deltas_[i].first == pair; ++i) delta += deltas_[i].second;
      if (delta == 0) continue;
      const int64_t count = counts_[pair] += delta;
      if (count > 0) {
        candidates_.push({count, pair});
      } else {
        // A pair that disappeared never comes back: only a merge makes new
        // neighbours, and they all contain the merge's new token.
        counts_.erase(pair);
        words_with_pair_.erase(pair);
      }
    }
  }

  std::vector<Word> words_;
  std::unordered_map<PairKey, int64_t> counts_;
  // Words that contain (or once contained) each pair; may list a word twice.
  std::unordered_map<PairKey, std::vector<int32_t>> words_with_pair_;
  std::priority_queue<Candidate> candidates_;
  std::vector<std::pair<PairKey, int64_t>> deltas_;  // of the merge in progress
};

}  // namespace

std::vector<std::pair<int32_t, int32_t>> learn_bpe_merges(
    const std::vector<std::string_view>& texts, int32_t max_merges, int64_t min_pair_count) {
  PairStatistics statistics(count_words(texts));
  std::vector<std::pair<int32_t, int32_t>> merges;
  while (static_cast<int32_t>(merges.size()) < max_merges) {
    const std::optional<Candidate> best = statistics.best();
    if (!best || best->count < min_pair_count) break;
    merges.emplace_back(left_of(best->pair), right_of(best->pair));
    statistics.merge(best->pair, kByteTokens + static_cast<int32_t>(merges.size()) - 1);
  }
  return merges;
}

}  // namespace accelerate::detail
