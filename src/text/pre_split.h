// GPT-2 style pre-split of text into pieces ("words") before BPE merging, so
// merges never cross word boundaries. Works on bytes: every byte string splits
// into pieces that concatenate back to it.
//
// Byte classes: letters are A-Z, a-z and every byte >= 0x80 (so a multi-byte
// UTF-8 character stays inside one piece, and invalid UTF-8 is still text);
// digits are 0-9; whitespace is space, \t, \n, \v, \f, \r; everything else is
// punctuation. A piece is, at each position:
//   - an English contraction suffix 's 't 'm 'd 're 've 'll (lowercase, as
//     GPT-2) not followed by a letter: "don't" -> "don" "'t";
//   - an optional single leading space, then a run of letters, of digits, or
//     of punctuation: " world", " 42", " --";
//   - a run of whitespace, less its last byte when that byte is a space that
//     the next piece takes: "a   b" -> "a" "  " " b", "a\n\nb" -> "a" "\n\n" "b".
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace accelerate::detail {

// The same rules as a regular expression in the Oniguruma syntax Hugging
// Face `tokenizers` uses (a Split pre-tokenizer, behaviour Isolated). On
// valid UTF-8 it cuts exactly the pieces pre_split() cuts (every non-ASCII
// character is a letter, as every byte >= 0x80 is here). BpeTokenizer writes
// it into its tokenizer.json; the tokenizer.json reader recognises it.
// tests/text/bpe_tokenizer_json_test.cpp holds `tokenizers` to that.
constexpr const char* kPreSplitRegex =
    R"('(?:s|t|m|d|re|ve|ll)(?![A-Za-z\x{80}-\x{10FFFF}]))"
    R"(|[A-Za-z\x{80}-\x{10FFFF}]+|[0-9]+|[^A-Za-z0-9\t\n\x{0B}\x{0C}\r \x{80}-\x{10FFFF}]+)"
    R"(| (?:[A-Za-z\x{80}-\x{10FFFF}]+|[0-9]+|[^A-Za-z0-9\t\n\x{0B}\x{0C}\r \x{80}-\x{10FFFF}]+))"
    R"(|[\t\n\x{0B}\x{0C}\r ]+(?= [^\t\n\x{0B}\x{0C}\r ])|[\t\n\x{0B}\x{0C}\r ]+)";

// End (exclusive) of the piece that starts at `begin` < text.size().
size_t next_piece_end(std::string_view text, size_t begin);

// All pieces of `text`, in order.
std::vector<std::string_view> pre_split(std::string_view text);

}  // namespace accelerate::detail
