// Helpers shared by the tokenizer tests (one unity translation unit: names at
// namespace scope must be unique across the test files).
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "accelerate/text/bpe_tokenizer.h"
#include "text/pre_split.h"

namespace accelerate::testing {

// The vocabulary of generated_text, separated by '|'.
constexpr std::string_view kGeneratedTextWords =
    "the|quick|brown|fox|jumps|over|lazy|dog|and|then|there|were|1961|42|,|.|--|don't|it's|\n\n|"
    "\n|caf\xc3\xa9|\xe6\x97\xa5\xe6\x9c\xac|na\xc3\xafve|  |(|)|\"|running|runner|ran|walking";

// Words drawn from a small vocabulary (English, numbers, punctuation,
// multi-byte UTF-8), so BPE has something to learn. Uses the generator's raw
// output (std::mt19937 is the same everywhere; its distributions are not),
// so the text is identical on every machine.
inline std::string generated_text(uint32_t seed, size_t words) {
  std::vector<std::string_view> vocabulary;
  for (size_t begin = 0, end = 0; end != std::string_view::npos; begin = end + 1) {
    end = kGeneratedTextWords.find('|', begin);
    vocabulary.push_back(kGeneratedTextWords.substr(begin, end - begin));
  }
  std::mt19937 generator(seed);
  std::string text;
  for (size_t i = 0; i < words; ++i) {
    if (i > 0 && generator() % 4 != 0) text += ' ';
    text += vocabulary[generator() % vocabulary.size()];
  }
  return text;
}

inline std::string random_bytes(std::mt19937& generator, size_t size) {
  std::string bytes(size, '\0');
  for (char& c : bytes) c = static_cast<char>(generator() & 0xff);
  return bytes;
}

// BPE encoding by definition: split into pieces, then apply each merge in
// order to every piece, left to right. Slow; the reference for encode().
inline std::vector<int32_t> reference_encode(const BpeTokenizer& tokenizer, std::string_view text) {
  std::vector<int32_t> ids;
  for (std::string_view piece : detail::pre_split(text)) {
    std::vector<int32_t> tokens(piece.begin(), piece.end());
    for (int32_t& token : tokens) token = static_cast<unsigned char>(token);
    for (size_t rank = 0; rank < tokenizer.merges().size(); ++rank) {
      const auto [left, right] = tokenizer.merges()[rank];
      std::vector<int32_t> merged;
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (i + 1 < tokens.size() && tokens[i] == left && tokens[i + 1] == right) {
          merged.push_back(BpeTokenizer::kByteTokens + static_cast<int32_t>(rank));
          ++i;
        } else {
          merged.push_back(tokens[i]);
        }
      }
      tokens.swap(merged);
    }
    ids.insert(ids.end(), tokens.begin(), tokens.end());
  }
  return ids;
}

// BPE training by definition: recount every pair before each merge. Slow;
// the reference for train()'s incremental counts.
inline std::vector<BpeTokenizer::Merge> reference_train(std::string_view text, size_t max_merges) {
  std::map<std::string_view, int64_t> piece_counts;
  for (std::string_view piece : detail::pre_split(text)) ++piece_counts[piece];
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;
  for (const auto& [piece, count] : piece_counts) {
    std::vector<int32_t> tokens(piece.begin(), piece.end());
    for (int32_t& token : tokens) token = static_cast<unsigned char>(token);
    words.emplace_back(tokens, count);
  }
  std::vector<BpeTokenizer::Merge> merges;
  while (merges.size() < max_merges) {
    std::map<BpeTokenizer::Merge, int64_t> pair_counts;  // ordered: ties go to the smallest
    for (const auto& [tokens, count] : words) {
      for (size_t i = 0; i + 1 < tokens.size(); ++i) {
        pair_counts[{tokens[i], tokens[i + 1]}] += count;
      }
    }
    const BpeTokenizer::Merge* best = nullptr;
    int64_t best_count = 1;  // the default min_pair_count is 2
    for (const auto& [pair, count] : pair_counts) {
      if (count > best_count) best = &pair, best_count = count;
    }
    if (best == nullptr) break;
    const BpeTokenizer::Merge merge = *best;
    const int32_t made = BpeTokenizer::kByteTokens + static_cast<int32_t>(merges.size());
    merges.push_back(merge);
    for (auto& [tokens, count] : words) {
      std::vector<int32_t> merged;
      for (size_t i = 0; i < tokens.size(); ++i) {
        const bool match =
            i + 1 < tokens.size() && tokens[i] == merge.first && tokens[i + 1] == merge.second;
        merged.push_back(match ? made : tokens[i]);
        i += match ? 1 : 0;
      }
      tokens.swap(merged);
    }
  }
  return merges;
}

}  // namespace accelerate::testing
