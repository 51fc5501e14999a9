// Tokenizers read from Hugging Face `tokenizer.json` files: byte-level BPE
// (GPT-2, Llama 3), BPE with byte fallback and the metaspace (Llama 2,
// Mistral) and WordPiece (BERT), with their normalizers, pre-tokenizers,
// post-processors and added tokens. Ids equal those of the `tokenizers`
// package for the same file (docs/tokenizers.md lists what is supported and
// how that was checked). LibTorch-free.
//
//   auto tokenizer = accelerate::Tokenizer::from_file("llama-3/tokenizer.json");
//   std::vector<int32_t> ids = tokenizer.encode("Hello world");  // with BOS
//   std::string text = tokenizer.decode(ids);                    // "Hello world"
//   auto pair = bert.encode_pair("question", "context");  // ids + token type ids
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "accelerate/common/arg.h"

namespace accelerate {

// Ids with their token type ids (0 for the first text, 1 for the second, as
// the post-processor assigns them).
struct Encoding {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;
};

// How encode_with_types / encode_pair shorten their result to max_length
// ids, special tokens included, as `tokenizers`' truncation (and
// transformers' truncation=True / "only_first" / "only_second") does:
// the special tokens are counted first, then the texts' own tokens are cut
// from their ends.
enum class TruncationStrategy {
  // A pair: the longer text loses tokens until both fit; when the shorter
  // one alone takes more than half the room, each keeps half of it.
  kLongestFirst,
  kOnlyFirst,   // only the first text loses tokens (Error if it cannot lose enough)
  kOnlySecond,  // only the second (Error without one, or if it cannot)
};
const char* to_string(TruncationStrategy strategy);  // "longest_first", ...

struct TruncationOptions {
  // The longest result, special tokens included. Error when it is below the
  // count of special tokens the post-processor adds.
  ACCELERATE_ARG(size_t, max_length) = 512;
  ACCELERATE_ARG(TruncationStrategy, strategy) = TruncationStrategy::kLongestFirst;
};

// What to do with a tokenizer.json's "truncation" and "padding" sections,
// which this reader does not apply. `tokenizers` applies them on every
// encode, so by default a file holding them is refused; transformers'
// tokenizers override them on every call (its padding and truncation are
// per call), so a program that pads and truncates itself, as transformers
// does, ignores them.
enum class SavedEncodingSettings { kRefuse, kIgnore };

class Tokenizer {
 public:
  // `path` is a tokenizer.json file or a folder holding one (a model folder).
  // Throws accelerate::Error naming the file and the problem: unreadable,
  // invalid JSON, or a component type or setting this reader does not
  // implement (so a file is never half-understood).
  static Tokenizer from_file(const std::string& path,
                             SavedEncodingSettings saved = SavedEncodingSettings::kRefuse);
  // The same from the file's text; `origin` names it in errors.
  static Tokenizer from_json(const std::string& json_text, const std::string& origin,
                             SavedEncodingSettings saved = SavedEncodingSettings::kRefuse);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // UTF-8 text to ids. Added tokens (special or not) in the text become their
  // ids; add_special_tokens adds what the post-processor adds (BOS, [CLS] ...
  // [SEP]). Invalid UTF-8 bytes are read as U+FFFD.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // One text with its token type ids.
  Encoding encode_with_types(std::string_view text, bool add_special_tokens = true) const;
  // Two texts (question and context, sentence pairs) as the post-processor
  // joins them, e.g. [CLS] A [SEP] B [SEP] with type ids 0... 1...
  Encoding encode_pair(std::string_view first, std::string_view second,
                       bool add_special_tokens = true) const;
  // The same, truncated to truncation.max_length() ids (TruncationOptions).
  Encoding encode_with_types(std::string_view text, const TruncationOptions& truncation,
                             bool add_special_tokens = true) const;
  Encoding encode_pair(std::string_view first, std::string_view second,
                       const TruncationOptions& truncation, bool add_special_tokens = true) const;

  // Ids to text through the file's decoder. skip_special_tokens (the default,
  // as in `tokenizers`) drops added tokens marked special. Throws
  // accelerate::Error for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = true) const;

  // The model's vocabulary plus added tokens (the highest id + 1).
  int32_t vocab_size() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Throws accelerate::Error for an id outside [0, vocab_size()).
  std::string id_to_token(int32_t id) const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace accelerate
