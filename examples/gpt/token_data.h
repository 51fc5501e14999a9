// The GPT example's training data: text tokenized once into a flat token
// file, memory-mapped, and cut into fixed-length windows for the DataLoader.
//
//   auto path = gpt::tokenize_to_cache("data/brown/train.txt", tokenizer, "cache");
//   gpt::TokenChunks chunks(gpt::TokenFile::open(path), 128);  // map-style dataset
//   accelerate::DataLoader loader(chunks, accelerate::DataLoaderOptions(16).shuffle(true));
//
// docs/gpt.md ("Data") describes the file format and the cache.
#pragma once

#include <accelerate/data/dataset.h>
#include <accelerate/text/bpe_tokenizer.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gpt {

// The file header: magic, version, token width, token count, vocab size,
// reserved; all little-endian. Tokens follow at kTokenFileHeaderBytes.
inline constexpr char kTokenFileMagic[8] = {'A', 'C', 'C', 'T', 'O', 'K', 'E', 'N'};
inline constexpr uint32_t kTokenFileVersion = 1;
inline constexpr size_t kTokenFileHeaderBytes = 32;

// 2 bytes a token for vocab_size <= 65536, else 4.
uint32_t token_width_for(int32_t vocab_size);

// Writes `tokens` (each in [0, vocab_size)) to a temporary file beside
// `path` and renames it into place, so a reader never sees half a file.
// Throws accelerate::Error for a bad token or vocab size, or an I/O failure.
void write_token_file(const std::string& path, const std::vector<int32_t>& tokens,
                      int32_t vocab_size);

// A token file mapped read-only. Immutable, so safe to share between threads.
// Files are only ever replaced by rename, never rewritten in place, so the
// mapping cannot shrink underneath a reader.
class TokenFile {
 public:
  // Throws a one-line accelerate::Error naming the file and the problem for a
  // missing, truncated or malformed file; check_tokens also scans every token
  // against the vocab size (one pass; skip it for a file you just wrote).
  static std::shared_ptr<const TokenFile> open(const std::string& path, bool check_tokens = true);

  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  ~TokenFile();

  size_t size() const { return count_; }
  int32_t vocab_size() const { return vocab_size_; }
  uint32_t token_width() const { return width_; }
  const std::string& path() const { return path_; }

  // Token i; throws std::out_of_range past the end.
  int32_t at(size_t i) const;
  // Tokens [start, start + count) into out. Throws std::out_of_range.
  void copy(size_t start, size_t count, int64_t* out) const;
  // The same as a new int64 tensor [count].
  at::Tensor tensor(size_t start, size_t count) const;
  // All tokens (for tests and small files).
  std::vector<int32_t> to_vector() const;

 private:
  TokenFile() = default;
  void check_range(size_t start, size_t count) const;

  std::string path_;
  void* mapping_ = nullptr;
  size_t mapped_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;
  size_t count_ = 0;
  uint32_t width_ = 0;
  int32_t vocab_size_ = 0;
};

// Non-overlapping windows of block_size tokens: example i is
// (tokens[i*T, i*T+T), tokens[i*T+1, i*T+T+1)), int64 [T] each, the target
// being the input shifted by one. size() = (count - 1) / T, so every target
// exists; the tail that does not fill a window is not used. get() only reads
// the mapping, so DataLoader workers may call it at once.
class TokenChunks {
 public:
  TokenChunks(std::shared_ptr<const TokenFile> file, int64_t block_size);
  size_t size() const;
  accelerate::Example get(size_t index) const;
  int64_t block_size() const { return block_size_; }
  const TokenFile& file() const { return *file_; }

 private:
  std::shared_ptr<const TokenFile> file_;
  int64_t block_size_;
};

// Tokenizes a text file once into cache_dir (created if needed) and returns
// the token file's path. Documents are the file's paragraphs: runs of lines
// separated by blank (empty or whitespace-only) lines; each is encoded with
// its lines' newlines and followed by end_of_text_id(). The name holds the
// text's file name, size and mtime and a hash of the tokenizer's merges, so a
// changed text or tokenizer re-tokenizes and an unchanged one returns at
// once. Concurrent callers each write a temporary file and rename it into
// place; they write the same bytes, so whichever rename lands last is right.
std::string tokenize_to_cache(const std::string& text_path,
                              const accelerate::BpeTokenizer& tokenizer,
                              const std::string& cache_dir);

// The tokens tokenize_to_cache stores for `text` (the document rule above).
std::vector<int32_t> tokenize_documents(const std::string& text,
                                        const accelerate::BpeTokenizer& tokenizer);

}  // namespace gpt
