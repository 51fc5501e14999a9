// Training, encoding and decoding (the file format is in bpe_file.cpp).
#include "accelerate/text/bpe_tokenizer.h"

#include <functional>
#include <queue>

#include "accelerate/common/errors.h"
#include "text/bpe_training.h"
#include "text/pre_split.h"

namespace accelerate {
namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// The number of merges vocab_size asks for, after checking the arguments.
int32_t checked_max_merges(int32_t vocab_size, const BpeTrainOptions& options) {
  if (vocab_size < BpeTokenizer::kMinVocabSize) {
    throw ConfigError("BpeTokenizer::train: vocab_size " + std::to_string(vocab_size) +
                      " is below " + std::to_string(BpeTokenizer::kMinVocabSize) +
                      " (the 256 byte tokens and <|endoftext|>)");
  }
  if (vocab_size > BpeTokenizer::kMaxVocabSize) {
    throw ConfigError("BpeTokenizer::train: vocab_size " + std::to_string(vocab_size) +
                      " is above the maximum " + std::to_string(BpeTokenizer::kMaxVocabSize));
  }
  if (options.min_pair_count() < 1) {
    throw ConfigError("BpeTokenizer::train: min_pair_count " +
                      std::to_string(options.min_pair_count()) + " must be at least 1");
  }
  return vocab_size - BpeTokenizer::kMinVocabSize;
}

}  // namespace

BpeTokenizer BpeTokenizer::train(std::string_view text, int32_t vocab_size,
                                 const BpeTrainOptions& options) {
  const int32_t max_merges = checked_max_merges(vocab_size, options);
  return BpeTokenizer(detail::learn_bpe_merges({text}, max_merges, options.min_pair_count()));
}

BpeTokenizer BpeTokenizer::train(const std::vector<std::string>& texts, int32_t vocab_size,
                                 const BpeTrainOptions& options) {
  const int32_t max_merges = checked_max_merges(vocab_size, options);
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  return BpeTokenizer(detail::learn_bpe_merges(views, max_merges, options.min_pair_count()));
}

BpeTokenizer::BpeTokenizer(std::vector<Merge> merges) : merges_(std::move(merges)) {
  token_bytes_.reserve(kByteTokens + merges_.size() + 1);
  for (int byte = 0; byte < kByteTokens; ++byte) {
    token_bytes_.emplace_back(1, static_cast<char>(byte));
  }
  merge_ranks_.reserve(merges_.size());
  for (int32_t rank = 0; rank < static_cast<int32_t>(merges_.size()); ++rank) {
    const auto [left, right] = merges_[rank];
    token_bytes_.push_back(token_bytes_[left] + token_bytes_[right]);
    merge_ranks_.emplace(pair_key(left, right), rank);
  }
  token_bytes_.emplace_back(kEndOfText);
}

const std::string& BpeTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw Error("BpeTokenizer: token id " + std::to_string(id) + " is outside [0, " +
                std::to_string(vocab_size()) + ")");
  }
  return token_bytes_[id];
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 2);
  // Text repeats its words: encode each distinct piece once per call.
  std::unordered_map<std::string_view, std::vector<int32_t>> encoded_pieces;
  for (size_t begin = 0, end = 0; begin < text.size(); begin = end) {
    end = detail::next_piece_end(text, begin);
    const std::string_view piece = text.substr(begin, end - begin);
    auto [cached, is_new] = encoded_pieces.try_emplace(piece);
    if (is_new) encode_piece(piece, cached->second);
    ids.insert(ids.end(), cached->second.begin(), cached->second.end());
  }
  return ids;
}

// Applies the merges in rank order, each one to all its occurrences left to
// right, exactly as training did. The tokens form a linked list over the
// piece's byte positions; a min-heap of (rank, position) holds the mergeable
// neighbours. A merge only makes pairs of higher rank (they contain its new
// token), so popping by rank replays training's order in O(n log n).
void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  const int32_t n = static_cast<int32_t>(piece.size());
  std::vector<int32_t> tokens(n);  // -1: merged into the token on its left
  std::vector<int32_t> previous(n);
  std::vector<int32_t> next(n);
  for (int32_t i = 0; i < n; ++i) {
    tokens[i] = static_cast<unsigned char>(piece[i]);
    previous[i] = i - 1;
    next[i] = i + 1;
  }
  // The rank of the pair that starts at `position`, or -1.
  auto rank_at = [&](int32_t position) {
    if (next[position] >= n) return -1;
    const auto found = merge_ranks_.find(pair_key(tokens[position], tokens[next[position]]));
    return found == merge_ranks_.end() ? -1 : found->second;
  };
  using Candidate = std::pair<int32_t, int32_t>;  // (rank, position)
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> candidates;
  auto push_pair_at = [&](int32_t position) {
    if (const int32_t rank = rank_at(position); rank >= 0) candidates.emplace(rank, position);
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair_at(i);
  while (!candidates.empty()) {
    const auto [rank, position] = candidates.top();
    candidates.pop();
    // Stale when a merge since took this position or its neighbour.
    if (tokens[position] < 0 || rank_at(position) != rank) continue;
    const int32_t absorbed = next[position];
    tokens[position] = kByteTokens + rank;
    tokens[absorbed] = -1;
    next[position] = next[absorbed];
    if (next[position] < n) previous[next[position]] = position;
    if (previous[position] >= 0) push_pair_at(previous[position]);
    push_pair_at(position);
  }
  for (int32_t i = 0; i < n; i = next[i]) out.push_back(tokens[i]);
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  size_t size = 0;
  for (const int32_t id : ids) size += token_bytes(id).size();
  std::string text;
  text.reserve(size);
  for (const int32_t id : ids) text += token_bytes_[id];
  return text;
}

}  // namespace accelerate
