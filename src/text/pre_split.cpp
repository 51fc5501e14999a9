#include "text/pre_split.h"

namespace accelerate::detail {
namespace {

enum class ByteClass { kLetter, kDigit, kSpace, kPunctuation };

ByteClass class_of(unsigned char byte) {
  if ((byte >= 'a' && byte <= 'z') || (byte >= 'A' && byte <= 'Z') || byte >= 0x80) {
    return ByteClass::kLetter;
  }
  if (byte >= '0' && byte <= '9') return ByteClass::kDigit;
  if (byte == ' ' || (byte >= '\t' && byte <= '\r')) return ByteClass::kSpace;
  return ByteClass::kPunctuation;
}

ByteClass class_at(std::string_view text, size_t i) {
  return class_of(static_cast<unsigned char>(text[i]));
}

// Length of the contraction suffix at `begin` ("'s", "'ll", ...), or 0.
size_t contraction_length(std::string_view text, size_t begin) {
  if (text[begin] != '\'') return 0;
  for (std::string_view suffix : {"'s", "'t", "'m", "'d", "'re", "'ve", "'ll"}) {
    if (text.compare(begin, suffix.size(), suffix) != 0) continue;
    const size_t end = begin + suffix.size();
    // "'sun" is a quote before a word, not a contraction.
    if (end == text.size() || class_at(text, end) != ByteClass::kLetter) return suffix.size();
  }
  return 0;
}

size_t run_end(std::string_view text, size_t i, ByteClass run_class) {
  while (i < text.size() && class_at(text, i) == run_class) ++i;
  return i;
}

}  // namespace

size_t next_piece_end(std::string_view text, size_t begin) {
  if (const size_t length = contraction_length(text, begin)) return begin + length;
  const ByteClass first = class_at(text, begin);
  if (first != ByteClass::kSpace) return run_end(text, begin, first);
  // A single space before a non-space joins the run that follows it.
  const bool space_then_word = text[begin] == ' ' && begin + 1 < text.size() &&
                               class_at(text, begin + 1) != ByteClass::kSpace;
  if (space_then_word) return run_end(text, begin + 1, class_at(text, begin + 1));
  const size_t end = run_end(text, begin, ByteClass::kSpace);
  // Leave a final space to the word after the run (begin < end - 1 here: a
  // lone space before a word was handled above).
  if (end < text.size() && text[end - 1] == ' ') return end - 1;
  return end;
}

std::vector<std::string_view> pre_split(std::string_view text) {
  std::vector<std::string_view> pieces;
  for (size_t begin = 0, end = 0; begin < text.size(); begin = end) {
    end = next_piece_end(text, begin);
    pieces.push_back(text.substr(begin, end - begin));
  }
  return pieces;
}

}  // namespace accelerate::detail
