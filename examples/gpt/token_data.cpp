#include "token_data.h"

#include <accelerate/common/errors.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <utility>

namespace gpt {
namespace {

namespace fs = std::filesystem;

// Bumped when tokenize_documents' rule changes, so old caches are not reused.
constexpr std::string_view kTokenizationScheme = "paragraphs-v1";

std::string errno_text() { return std::generic_category().message(errno); }

void put_le(unsigned char* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(value >> (8 * i));
}

uint64_t get_le(const unsigned char* in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return value;
}

// Owns a file descriptor; unlinks the temporary file unless released.
struct TempFile {
  int fd = -1;
  std::string path;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!path.empty()) ::unlink(path.c_str());
  }
};

void write_all(int fd, const unsigned char* data, size_t bytes, const std::string& path) {
  while (bytes > 0) {
    const ssize_t n = ::write(fd, data, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw accelerate::Error("write_token_file: " + path + ": write failed: " + errno_text());
    }
    data += n, bytes -= static_cast<size_t>(n);
  }
}

// FNV-1a: a stable 64-bit hash (std::hash may differ between builds).
struct Fnv1a {
  uint64_t state = 14695981039346656037ull;
  void add(const void* data, size_t bytes) {
    for (size_t i = 0; i < bytes; ++i) {
      state = (state ^ static_cast<const unsigned char*>(data)[i]) * 1099511628211ull;
    }
  }
  void add_le(uint64_t value, int bytes) {
    unsigned char buffer[8];
    put_le(buffer, value, bytes);
    add(buffer, bytes);
  }
};

std::string tokenizer_hash(const accelerate::BpeTokenizer& tokenizer) {
  Fnv1a hash;
  hash.add(kTokenizationScheme.data(), kTokenizationScheme.size());
  hash.add_le(static_cast<uint32_t>(tokenizer.vocab_size()), 4);
  for (const auto& [left, right] : tokenizer.merges()) {
    hash.add_le(static_cast<uint32_t>(left), 4);
    hash.add_le(static_cast<uint32_t>(right), 4);
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash.state));
  return hex;
}

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n\v\f") == std::string_view::npos;
}

// Size and modification time in nanoseconds since the Unix epoch (as finely
// as the filesystem keeps it).
std::pair<uintmax_t, long long> size_and_mtime(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    throw accelerate::Error("tokenize_to_cache: " + path + ": cannot stat: " + errno_text());
  }
  if (!S_ISREG(info.st_mode)) {
    throw accelerate::Error("tokenize_to_cache: " + path + ": not a regular file");
  }
  return {static_cast<uintmax_t>(info.st_size),
          static_cast<long long>(info.st_mtim.tv_sec) * 1'000'000'000 + info.st_mtim.tv_nsec};
}

}  // namespace

uint32_t token_width_for(int32_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

void write_token_file(const std::string& path, const std::vector<int32_t>& tokens,
                      int32_t vocab_size) {
  const auto fail = [&](const std::string& problem) {
    throw accelerate::Error("write_token_file: " + path + ": " + problem);
  };
  if (vocab_size <= 0) fail("vocab size " + std::to_string(vocab_size) + " is not positive");
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size) {
      fail("token " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
           " is not in [0, " + std::to_string(vocab_size) + ")");
    }
  }
  const uint32_t width = token_width_for(vocab_size);
  unsigned char header[kTokenFileHeaderBytes] = {};
  std::memcpy(header, kTokenFileMagic, sizeof kTokenFileMagic);
  put_le(header + 8, kTokenFileVersion, 4);
  put_le(header + 12, width, 4);
  put_le(header + 16, tokens.size(), 8);
  put_le(header + 24, static_cast<uint32_t>(vocab_size), 4);  // 28..31 reserved, zero

  // A unique temporary name per writer: concurrent writers never share one.
  TempFile temp;
  std::string pattern = path + ".tmp.XXXXXX";
  temp.fd = ::mkstemp(pattern.data());
  if (temp.fd < 0) fail("cannot create a temporary file: " + errno_text());
  temp.path = pattern;
  ::fchmod(temp.fd, 0644);  // mkstemp's 0600 would hide a shared cache from other users
  write_all(temp.fd, header, sizeof header, path);
  std::vector<unsigned char> buffer;
  constexpr size_t kChunk = 1 << 16;
  for (size_t start = 0; start < tokens.size(); start += kChunk) {
    const size_t n = std::min(kChunk, tokens.size() - start);
    buffer.resize(n * width);
    for (size_t i = 0; i < n; ++i) put_le(&buffer[i * width], tokens[start + i], width);
    write_all(temp.fd, buffer.data(), buffer.size(), path);
  }
  const int fd = std::exchange(temp.fd, -1);
  if (::close(fd) != 0) fail("close failed: " + errno_text());
  if (::rename(temp.path.c_str(), path.c_str()) != 0) fail("rename failed: " + errno_text());
  temp.path.clear();
}

std::shared_ptr<const TokenFile> TokenFile::open(const std::string& path, bool check_tokens) {
  const auto fail = [&](const std::string& problem) {
    throw accelerate::Error("TokenFile: " + path + ": " + problem);
  };
  std::shared_ptr<TokenFile> file(new TokenFile());
  file->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open: " + errno_text());
  struct stat info {};
  const bool stat_ok = ::fstat(fd, &info) == 0;
  const std::string stat_error = stat_ok ? "" : errno_text();
  const auto bytes = static_cast<size_t>(info.st_size);
  if (stat_ok && S_ISREG(info.st_mode) && bytes >= kTokenFileHeaderBytes) {
    void* mapping = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping != MAP_FAILED) file->mapping_ = mapping, file->mapped_bytes_ = bytes;
  }
  const std::string map_error = file->mapping_ ? "" : errno_text();
  ::close(fd);
  if (!stat_ok) fail("cannot stat: " + stat_error);
  if (!S_ISREG(info.st_mode)) fail("not a regular file");
  if (bytes < kTokenFileHeaderBytes) {
    fail("truncated header: " + std::to_string(bytes) + " of " +
         std::to_string(kTokenFileHeaderBytes) + " bytes");
  }
  if (!file->mapping_) fail("cannot map: " + map_error);

  const auto* header = static_cast<const unsigned char*>(file->mapping_);
  if (std::memcmp(header, kTokenFileMagic, sizeof kTokenFileMagic) != 0) {
    fail("not a token file (bad magic)");
  }
  const uint64_t version = get_le(header + 8, 4), width = get_le(header + 12, 4);
  const uint64_t count = get_le(header + 16, 8), vocab = get_le(header + 24, 4);
  if (version != kTokenFileVersion) {
    fail("unsupported format version " + std::to_string(version) + " (this build reads " +
         std::to_string(kTokenFileVersion) + ")");
  }
  if (vocab == 0 || vocab > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    fail("vocab size " + std::to_string(vocab) + " is out of range");
  }
  if (width != token_width_for(static_cast<int32_t>(vocab))) {
    fail("token width " + std::to_string(width) + " does not match vocab size " +
         std::to_string(vocab) + " (expected " +
         std::to_string(token_width_for(static_cast<int32_t>(vocab))) + ")");
  }
  if (get_le(header + 28, 4) != 0) fail("reserved header bytes are not zero");
  const size_t payload = bytes - kTokenFileHeaderBytes;
  const std::string declared = "the header says " + std::to_string(count) + " tokens of " +
                               std::to_string(width) + " bytes but " + std::to_string(payload) +
                               " bytes follow";
  if (count > payload / width) fail(declared + " (truncated?)");
  if (count * width != payload) {
    fail(declared + " (expected " + std::to_string(count * width) + ")");
  }
  file->tokens_ = header + kTokenFileHeaderBytes;
  file->count_ = count;
  file->width_ = static_cast<uint32_t>(width);
  file->vocab_size_ = static_cast<int32_t>(vocab);
  // With 2-byte tokens and vocab 65536 every value is valid: no scan needed.
  if (check_tokens && !(width == 2 && vocab == 65536)) {
    for (size_t i = 0; i < count; ++i) {
      const uint64_t token = get_le(file->tokens_ + i * width, static_cast<int>(width));
      if (token >= vocab) {
        fail("token " + std::to_string(token) + " at index " + std::to_string(i) +
             " is not below vocab size " + std::to_string(vocab));
      }
    }
  }
  return file;
}

TokenFile::~TokenFile() {
  if (mapping_) ::munmap(mapping_, mapped_bytes_);
}

void TokenFile::check_range(size_t start, size_t count) const {
  if (start > count_ || count > count_ - start) {
    throw std::out_of_range("TokenFile: " + path_ + ": tokens [" + std::to_string(start) + ", " +
                            std::to_string(start) + " + " + std::to_string(count) +
                            ") are past its " + std::to_string(count_) + " tokens");
  }
}

int32_t TokenFile::at(size_t i) const {
  check_range(i, 1);
  return static_cast<int32_t>(get_le(tokens_ + i * width_, static_cast<int>(width_)));
}

void TokenFile::copy(size_t start, size_t count, int64_t* out) const {
  check_range(start, count);
  const unsigned char* in = tokens_ + start * width_;
  // Two loops with constant widths, so the compiler turns each into plain loads.
  if (width_ == 2) {
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<int64_t>(get_le(in + 2 * i, 2));
  } else {
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<int64_t>(get_le(in + 4 * i, 4));
  }
}

at::Tensor TokenFile::tensor(size_t start, size_t count) const {
  auto out = torch::empty({static_cast<int64_t>(count)}, torch::kLong);
  copy(start, count, out.data_ptr<int64_t>());
  return out;
}

std::vector<int32_t> TokenFile::to_vector() const {
  std::vector<int32_t> out(count_);
  for (size_t i = 0; i < count_; ++i) out[i] = at(i);
  return out;
}

TokenChunks::TokenChunks(std::shared_ptr<const TokenFile> file, int64_t block_size)
    : file_(std::move(file)), block_size_(block_size) {
  if (!file_) throw std::invalid_argument("TokenChunks: no token file");
  if (block_size_ <= 0) {
    throw std::invalid_argument("TokenChunks: block size " + std::to_string(block_size_) +
                                " is not positive");
  }
}

size_t TokenChunks::size() const {
  return file_->size() == 0 ? 0 : (file_->size() - 1) / static_cast<size_t>(block_size_);
}

accelerate::Example TokenChunks::get(size_t index) const {
  if (index >= size()) {
    throw std::out_of_range("TokenChunks: example " + std::to_string(index) + " of " +
                            std::to_string(size()) + " in " + file_->path());
  }
  const size_t start = index * static_cast<size_t>(block_size_);
  const auto length = static_cast<size_t>(block_size_);
  return {file_->tensor(start, length), file_->tensor(start + 1, length)};
}

std::vector<int32_t> tokenize_documents(const std::string& text,
                                        const accelerate::BpeTokenizer& tokenizer) {
  std::vector<int32_t> tokens;
  const std::string_view all(text);
  // A paragraph is contiguous in the text: [begin, end) over its lines.
  size_t begin = std::string_view::npos, end = 0;
  const auto flush = [&] {
    if (begin == std::string_view::npos) return;
    const auto ids = tokenizer.encode(all.substr(begin, end - begin));
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    tokens.push_back(tokenizer.end_of_text_id());
    begin = std::string_view::npos;
  };
  for (size_t at = 0; at < all.size();) {
    const size_t newline = all.find('\n', at);
    const size_t next = newline == std::string_view::npos ? all.size() : newline + 1;
    if (is_blank(all.substr(at, next - at))) {
      flush();
    } else {
      if (begin == std::string_view::npos) begin = at;
      end = next;
    }
    at = next;
  }
  flush();
  return tokens;
}

std::string tokenize_to_cache(const std::string& text_path,
                              const accelerate::BpeTokenizer& tokenizer,
                              const std::string& cache_dir) {
  const auto [size, mtime] = size_and_mtime(text_path);
  const std::string name = fs::path(text_path).filename().string() + "-" + std::to_string(size) +
                           "-" + std::to_string(mtime) + "-" + tokenizer_hash(tokenizer) +
                           ".tokens";
  const std::string path = (fs::path(cache_dir) / name).string();
  std::error_code error;
  if (fs::exists(path, error)) {
    try {
      // The header and size only: the writer checked every token.
      if (TokenFile::open(path, false)->vocab_size() == tokenizer.vocab_size()) return path;
    } catch (const accelerate::Error&) {
      // A damaged cache entry: tokenize again and replace it.
    }
  }
  fs::create_directories(cache_dir, error);
  if (error) {
    throw accelerate::Error("tokenize_to_cache: cannot create " + cache_dir + ": " +
                            error.message());
  }
  std::ifstream in(text_path, std::ios::binary);
  if (!in) throw accelerate::Error("tokenize_to_cache: " + text_path + ": cannot open");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw accelerate::Error("tokenize_to_cache: " + text_path + ": read failed");
  // The name must describe the bytes we read, not a newer version of the file.
  if (size_and_mtime(text_path) != std::make_pair(size, mtime) || text.size() != size) {
    throw accelerate::Error("tokenize_to_cache: " + text_path +
                            ": the file changed while it was being tokenized");
  }
  write_token_file(path, tokenize_documents(text, tokenizer), tokenizer.vocab_size());
  return path;
}

}  // namespace gpt
