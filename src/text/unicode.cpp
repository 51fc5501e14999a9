#include "text/unicode.h"

#include <algorithm>

namespace accelerate::detail {
namespace {

constexpr char32_t kReplacement = 0xFFFD;
constexpr char32_t kHangulFirst = 0xAC00, kHangulLast = 0xD7A3;

// Decodes one character at bytes[i]; returns the number of bytes it used. An
// invalid sequence yields U+FFFD over its maximal valid prefix (at least one
// byte), the rule Python's and Rust's lossy decoders share.
size_t decode_one(std::string_view bytes, size_t i, char32_t* out) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(bytes[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) {
    *out = lead;
    return 1;
  }
  size_t length = 0;
  char32_t value = 0;
  unsigned char low = 0x80, high = 0xBF;  // range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, value = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, value = lead & 0x0F;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, value = lead & 0x07;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    *out = kReplacement;
    return 1;
  }
  for (size_t k = 1; k < length; ++k) {
    const bool in_range = i + k < bytes.size() && byte(i + k) >= (k == 1 ? low : 0x80) &&
                          byte(i + k) <= (k == 1 ? high : 0xBF);
    if (!in_range) {
      *out = kReplacement;
      return k;
    }
    value = (value << 6) | (byte(i + k) & 0x3F);
  }
  *out = value;
  return length;
}

}  // namespace

Category category_of(char32_t c) {
  const CategoryRun* end = kCategoryRuns + kCategoryRunCount;
  const CategoryRun* run = std::upper_bound(
      kCategoryRuns, end, c, [](char32_t v, const CategoryRun& r) { return v < r.first; });
  return static_cast<Category>((run - 1)->category);
}

bool is_letter(char32_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
  const Category k = category_of(c);
  return k >= Category::kLu && k <= Category::kLo;
}

bool is_number(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const Category k = category_of(c);
  return k >= Category::kNd && k <= Category::kNo;
}

bool is_mark_nonspacing(char32_t c) { return c >= 0x300 && category_of(c) == Category::kMn; }

bool is_punctuation(char32_t c) {
  const Category k = category_of(c);
  return k >= Category::kPc && k <= Category::kPo;
}

bool is_white_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= '\t' && c <= '\r');
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_alphanumeric(char32_t c) { return is_letter(c) || is_number(c); }

void append_decomposition(char32_t c, std::u32string& out) {
  if (c < 0xC0) {
    out.push_back(c);
    return;
  }
  if (c >= kHangulFirst && c <= kHangulLast) {
    // The Unicode standard's arithmetic decomposition of Hangul syllables.
    const char32_t index = c - kHangulFirst;
    out.push_back(0x1100 + index / (21 * 28));
    out.push_back(0x1161 + (index % (21 * 28)) / 28);
    if (index % 28 != 0) out.push_back(0x11A7 + index % 28);
    return;
  }
  const Decomposition* end = kDecompositions + kDecompositionCount;
  const Decomposition* found = std::lower_bound(
      kDecompositions, end, c, [](const Decomposition& d, char32_t v) { return d.code_point < v; });
  if (found == end || found->code_point != c) {
    out.push_back(c);
    return;
  }
  for (char32_t part : found->parts) {
    if (part != 0) out.push_back(part);
  }
}

namespace {
uint8_t combining_class(char32_t c) {
  if (c < 0x300) return 0;
  const CombiningRun* end = kCombiningRuns + kCombiningRunCount;
  const CombiningRun* run = std::upper_bound(
      kCombiningRuns, end, c, [](char32_t v, const CombiningRun& r) { return v < r.first; });
  return run == kCombiningRuns ? 0 : (run - 1)->combining_class;
}
}  // namespace

std::u32string nfd(const std::u32string& text) {
  std::u32string out;
  out.reserve(text.size());
  for (char32_t c : text) append_decomposition(c, out);
  // Canonical ordering: a stable sort of each run of non-starters by class.
  for (size_t i = 0; i < out.size();) {
    if (combining_class(out[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && combining_class(out[j]) != 0) ++j;
    std::stable_sort(out.begin() + i, out.begin() + j, [](char32_t a, char32_t b) {
      return combining_class(a) < combining_class(b);
    });
    i = j;
  }
  return out;
}

void append_lowercase(char32_t c, std::u32string& out) {
  if (c < 0x80) {
    out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  const LowercaseMapping* end = kLowercase + kLowercaseCount;
  const LowercaseMapping* found = std::lower_bound(
      kLowercase, end, c, [](const LowercaseMapping& m, char32_t v) { return m.code_point < v; });
  if (found == end || found->code_point != c) {
    out.push_back(c);
    return;
  }
  out.push_back(found->lower[0]);
  if (found->lower[1] != 0) out.push_back(found->lower[1]);
}

std::u32string utf8_to_u32(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t c;
    i += decode_one(text, i, &c);
    out.push_back(c);
  }
  return out;
}

void append_utf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string u32_to_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) append_utf8(c, out);
  return out;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    char32_t c;
    const size_t used = decode_one(bytes, i, &c);
    if (c == kReplacement && !(used == 3 && bytes.substr(i, 3) == "\xEF\xBF\xBD")) {
      append_utf8(c, out);
    } else {
      out.append(bytes.substr(i, used));
    }
    i += used;
  }
  return out;
}

bool valid_utf8(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    char32_t c;
    const size_t used = decode_one(bytes, i, &c);
    if (c == kReplacement && bytes.substr(i, 3) != "\xEF\xBF\xBD") return false;
    i += used;
  }
  return true;
}

}  // namespace accelerate::detail
