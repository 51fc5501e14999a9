// A byte-level BPE tokenizer (GPT-2 style) for training language models on
// raw text. LibTorch-free.
//
//   auto tokenizer = accelerate::BpeTokenizer::train(text, 8192);
//   std::vector<int32_t> ids = tokenizer.encode("Hello world");
//   ids.push_back(tokenizer.end_of_text_id());      // between documents
//   tokenizer.save("tokenizer.bpe");
//   auto same = accelerate::BpeTokenizer::load("tokenizer.bpe");
//
// Ids 0-255 are the 256 byte values, so encode/decode round-trip any byte
// string exactly (invalid UTF-8 included). Ids 256.. are merges, in the order
// training found them; the last id is <|endoftext|>. docs/tokenizer.md
// describes the pre-split rules, the tie-breaking rule and the file format.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "accelerate/common/arg.h"

namespace accelerate {

struct BpeTrainOptions {
  // Training stops early when the most frequent pair occurs fewer times than
  // this: merging a pair seen once only memorizes one word.
  ACCELERATE_ARG(int64_t, min_pair_count) = 2;
};

class BpeTokenizer {
 public:
  using Merge = std::pair<int32_t, int32_t>;

  static constexpr int32_t kByteTokens = 256;
  // Byte tokens plus <|endoftext|>: a tokenizer without merges.
  static constexpr int32_t kMinVocabSize = kByteTokens + 1;
  static constexpr int32_t kMaxVocabSize = 1 << 24;
  static constexpr std::string_view kEndOfText = "<|endoftext|>";

  // Learns vocab_size - 257 merges (fewer when the text runs out of pairs
  // that occur min_pair_count times; vocab_size() then says how many). Each
  // text is pre-split on its own, so merges never cross texts or words.
  // Throws ConfigError when vocab_size is outside [kMinVocabSize, kMaxVocabSize].
  static BpeTokenizer train(std::string_view text, int32_t vocab_size,
                            const BpeTrainOptions& options = BpeTrainOptions());
  static BpeTokenizer train(const std::vector<std::string>& texts, int32_t vocab_size,
                            const BpeTrainOptions& options = BpeTrainOptions());

  // Reads a file written by save(). Throws accelerate::Error naming the file,
  // the line and the problem.
  static BpeTokenizer load(const std::string& path);
  // Writes the merges (a temporary file renamed into place, so readers never
  // see half a file). Throws accelerate::Error when the file cannot be written.
  void save(const std::string& path) const;
  // Writes Hugging Face's tokenizer.json for this tokenizer (a byte-level
  // BPE with this pre-split as its Split regex, <|endoftext|> a special added
  // token), which `tokenizers`, transformers and accelerate::Tokenizer read
  // with the ids encode() gives. Written as save() writes. Throws
  // accelerate::Error when two tokens stand for the same bytes (a
  // tokenizer.json vocabulary holds each token once) or it cannot write.
  void save_tokenizer_json(const std::string& path) const;

  // Text is always plain text: the characters "<|endoftext|>" in it encode as
  // ordinary bytes, so a corpus cannot forge a document boundary. Append
  // end_of_text_id() yourself.
  std::vector<int32_t> encode(std::string_view text) const;
  // Concatenates the tokens' bytes (end_of_text_id() gives "<|endoftext|>").
  // Throws accelerate::Error for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t vocab_size() const { return static_cast<int32_t>(token_bytes_.size()); }
  int32_t end_of_text_id() const { return vocab_size() - 1; }
  // Merge i made token kByteTokens + i from two earlier tokens.
  const std::vector<Merge>& merges() const { return merges_; }
  // The bytes token `id` stands for. Throws accelerate::Error when out of range.
  const std::string& token_bytes(int32_t id) const;

  bool operator==(const BpeTokenizer& other) const { return merges_ == other.merges_; }
  bool operator!=(const BpeTokenizer& other) const { return !(*this == other); }

 private:
  // merges must be valid (each id earlier than the token it makes, no pair twice).
  explicit BpeTokenizer(std::vector<Merge> merges);
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  std::vector<Merge> merges_;
  std::vector<std::string> token_bytes_;
  // Pair (left << 32 | right) -> merge rank (the made token is kByteTokens + rank).
  std::unordered_map<uint64_t, int32_t> merge_ranks_;
};

}  // namespace accelerate
