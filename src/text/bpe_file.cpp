// The tokenizer file (docs/tokenizer.md): a header line, then one merge a line.
//
//   accelerate-bpe 1 vocab_size 8192
//   32 116
//   104 101
//   ...                  (vocab_size - 257 lines; line k+2 makes token 256 + k)
//
// Every line ends with '\n', so a file cut anywhere is detected. Ids are
// decimal; a merge may only use ids of tokens made before it.

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <unordered_map>

#include "accelerate/common/errors.h"
#include "accelerate/text/bpe_tokenizer.h"
#include "common/environment_text.h"
#include "common/replace_file.h"

namespace accelerate {
namespace {

constexpr std::string_view kMagic = "accelerate-bpe";
constexpr long long kFormatVersion = 1;
const std::string kExpectedHeader = "'accelerate-bpe 1 vocab_size N'";

// Throws the one-line error for `line` (0: the file as a whole) of `path`.
[[noreturn]] void fail_at(const std::string& path, size_t line, const std::string& problem) {
  const std::string where = line == 0 ? path : path + ":" + std::to_string(line);
  throw Error("BpeTokenizer::load: " + where + ": " + problem);
}

// A line echoed into an error message: printable and short.
std::string excerpt(std::string_view line) {
  constexpr size_t kMaxLength = 60;
  const std::string shown = detail::printable(line.substr(0, kMaxLength));
  return "'" + shown + (line.size() > kMaxLength ? "...'" : "'");
}

// The vocab size the header announces.
int32_t parse_header(const std::string& path, std::string_view header) {
  const std::vector<std::string_view> fields = detail::split(header, ' ');
  if (fields.size() != 4 || fields[0] != kMagic || fields[2] != "vocab_size") {
    fail_at(
        path, 1,
        "not an accelerate-bpe header: " + excerpt(header) + " (expected " + kExpectedHeader + ")");
  }
  const auto version = detail::parse_integer(fields[1]);
  if (!version || *version != kFormatVersion) {
    fail_at(path, 1,
            "unsupported format version " + excerpt(fields[1]) + " (this build reads " +
                std::to_string(kFormatVersion) + ")");
  }
  const auto vocab_size =
      detail::parse_integer_in(fields[3], BpeTokenizer::kMinVocabSize, BpeTokenizer::kMaxVocabSize);
  if (!vocab_size) {
    fail_at(path, 1,
            "vocab_size " + excerpt(fields[3]) + " is not a whole number in [" +
                std::to_string(BpeTokenizer::kMinVocabSize) + ", " +
                std::to_string(BpeTokenizer::kMaxVocabSize) + "]");
  }
  return static_cast<int32_t>(*vocab_size);
}

// The merge on `line`, which makes token `made`: two ids below `made`.
BpeTokenizer::Merge parse_merge(const std::string& path, size_t line, std::string_view text,
                                int32_t made) {
  const std::vector<std::string_view> fields = detail::split(text, ' ');
  const auto left = fields.size() == 2 ? detail::parse_integer(fields[0]) : std::nullopt;
  const auto right = fields.size() == 2 ? detail::parse_integer(fields[1]) : std::nullopt;
  if (!left || !right) {
    fail_at(path, line, "expected two token ids separated by one space, got " + excerpt(text));
  }
  for (const long long id : {*left, *right}) {
    if (id < 0 || id >= made) {
      fail_at(path, line,
              "token id " + std::to_string(id) + " is out of range: this merge makes token " +
                  std::to_string(made) + ", so its ids must be in [0, " + std::to_string(made) +
                  ")");
    }
  }
  return {static_cast<int32_t>(*left), static_cast<int32_t>(*right)};
}

}  // namespace

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_at(path, 0, std::string("cannot open: ") + std::strerror(errno));
  const std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail_at(path, 0, "read error");

  if (content.empty()) fail_at(path, 0, "empty file (expected the header " + kExpectedHeader + ")");
  std::vector<std::string_view> lines = detail::split(content, '\n');
  // The header first: a file of another kind is named as such, not as truncated.
  const int32_t vocab_size = parse_header(path, lines[0]);
  if (!lines.back().empty()) {
    fail_at(path, lines.size(), "the last line does not end with a newline (truncated file?)");
  }
  lines.pop_back();
  const size_t expected_merges = static_cast<size_t>(vocab_size - kMinVocabSize);
  const size_t merge_lines = lines.size() - 1;
  if (merge_lines < expected_merges) {
    fail_at(path, lines.size() + 1,
            "truncated: vocab_size " + std::to_string(vocab_size) + " needs " +
                std::to_string(expected_merges) + " merges, the file ends after " +
                std::to_string(merge_lines));
  }
  if (merge_lines > expected_merges) {
    fail_at(path, expected_merges + 2,
            "more merges than vocab_size " + std::to_string(vocab_size) + " allows (" +
                std::to_string(expected_merges) + ")");
  }
  std::vector<Merge> merges;
  merges.reserve(expected_merges);
  std::unordered_map<uint64_t, size_t> line_of_pair;
  for (size_t i = 0; i < expected_merges; ++i) {
    const size_t line = i + 2;
    const Merge merge =
        parse_merge(path, line, lines[line - 1], kByteTokens + static_cast<int32_t>(i));
    const uint64_t key =
        (static_cast<uint64_t>(merge.first) << 32) | static_cast<uint32_t>(merge.second);
    const auto [first, is_new] = line_of_pair.emplace(key, line);
    if (!is_new) {
      fail_at(path, line,
              "merge " + std::to_string(merge.first) + " " + std::to_string(merge.second) +
                  " repeats line " + std::to_string(first->second));
    }
    merges.push_back(merge);
  }
  return BpeTokenizer(std::move(merges));
}

void BpeTokenizer::save(const std::string& path) const {
  // std::to_string, not a stream: a global locale must not group digits.
  std::string content = std::string(kMagic) + " " + std::to_string(kFormatVersion) +
                        " vocab_size " + std::to_string(vocab_size()) + "\n";
  for (const auto& [left, right] : merges_) {
    content += std::to_string(left) + " " + std::to_string(right) + "\n";
  }
  detail::replace_file(path, content, "BpeTokenizer::save");
}

}  // namespace accelerate
