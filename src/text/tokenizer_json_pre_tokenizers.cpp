// Pre-tokenizers of tokenizer.json files. The regexes byte-level BPE files
// use (GPT-2's, Llama 3's, Qwen2's, and BpeTokenizer's own pre-split) are
// matched by hand (a regex engine with Unicode classes is not among the
// library's dependencies); any other Split pattern is refused.
#include <string>
#include <vector>

#include "text/pre_split.h"
#include "text/tokenizer_json_parts.h"
#include "text/unicode.h"

namespace accelerate::detail {
namespace {

// GPT-2's regex, as `tokenizers` spells it, and Llama 3's / Qwen2's.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

using Text = std::u32string;

bool other_class(char32_t c) { return !is_white_space(c) && !is_letter(c) && !is_number(c); }

template <typename Pred>
size_t run_of(const Text& t, size_t i, Pred pred) {
  while (i < t.size() && pred(t[i])) ++i;
  return i;
}

// Length of 's 't 're 've 'm 'll 'd at i (case-insensitive when asked), or 0.
size_t contraction(const Text& t, size_t i, bool ignore_case) {
  if (t[i] != '\'' || i + 1 >= t.size()) return 0;
  const auto low = [&](size_t k) -> char32_t {
    if (k >= t.size()) return 0;
    return ignore_case && t[k] >= 'A' && t[k] <= 'Z' ? t[k] + 32 : t[k];
  };
  const char32_t a = low(i + 1), b = low(i + 2);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// \s+(?!\S) then \s+: a whitespace run, less its last character when a
// non-space follows and the run is longer than one.
size_t whitespace_tail(const Text& t, size_t i) {
  const size_t end = run_of(t, i, is_white_space);
  if (end < t.size() && end - i > 1) return end - 1;
  return end;
}

size_t gpt2_piece_end(const Text& t, size_t i) {
  if (size_t n = contraction(t, i, false)) return i + n;
  const size_t j = t[i] == ' ' && i + 1 < t.size() ? i + 1 : i;  // " ?"
  if (is_letter(t[j])) return run_of(t, j, is_letter);
  if (is_number(t[j])) return run_of(t, j, is_number);
  if (other_class(t[j])) return run_of(t, j, other_class);
  return whitespace_tail(t, i);
}

size_t llama3_piece_end(const Text& t, size_t i, int max_digits) {
  if (size_t n = contraction(t, i, true)) return i + n;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (is_letter(t[i])) return run_of(t, i, is_letter);
  const bool may_lead = t[i] != '\r' && t[i] != '\n' && !is_number(t[i]);
  if (may_lead && i + 1 < t.size() && is_letter(t[i + 1])) return run_of(t, i + 1, is_letter);
  // \p{N}{1,3}
  if (is_number(t[i])) {
    size_t j = i;
    while (j < t.size() && j - i < static_cast<size_t>(max_digits) && is_number(t[j])) ++j;
    return j;
  }
  // " ?[^\s\p{L}\p{N}]+[\r\n]*"
  const size_t j = t[i] == ' ' && i + 1 < t.size() && other_class(t[i + 1]) ? i + 1 : i;
  if (other_class(t[j])) {
    return run_of(t, run_of(t, j, other_class), [](char32_t c) { return c == '\r' || c == '\n'; });
  }
  // \s*[\r\n]+: through the last newline of the whitespace run.
  const size_t end = run_of(t, i, is_white_space);
  for (size_t k = end; k > i; --k) {
    if (t[k - 1] == '\r' || t[k - 1] == '\n') return k;
  }
  return whitespace_tail(t, i);
}

template <typename PieceEnd>
std::vector<Text> split_with(const Text& text, PieceEnd piece_end) {
  std::vector<Text> pieces;
  for (size_t i = 0, end; i < text.size(); i = end) {
    end = piece_end(text, i);
    pieces.push_back(text.substr(i, end - i));
  }
  return pieces;
}

// BpeTokenizer's pre-split (pre_split.h), on the text's UTF-8 bytes: every
// non-ASCII byte is a letter there, so pieces never cut a character.
std::vector<Text> split_bpe_pieces(const Text& t) {
  const std::string bytes = u32_to_utf8(t);  // the pieces view it
  std::vector<Text> pieces;
  for (std::string_view piece : pre_split(bytes)) pieces.push_back(utf8_to_u32(piece));
  return pieces;
}

using Splitter = std::vector<Text> (*)(const Text&);
std::vector<Text> split_llama3_3(const Text& t) { return split_llama3(t, 3); }
std::vector<Text> split_llama3_1(const Text& t) { return split_llama3(t, 1); }

// Replaces each piece by the pieces `splitter` makes of it.
void split_each(std::vector<Text>& pieces, Splitter splitter) {
  std::vector<Text> out;
  for (const Text& piece : pieces) {
    for (Text& part : splitter(piece)) out.push_back(std::move(part));
  }
  pieces.swap(out);
}

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void split(std::vector<Text>& pieces, bool /*at_start*/) const override {
    if (add_prefix_space_) {
      for (Text& piece : pieces) {
        if (piece.empty() || piece[0] != ' ') piece.insert(piece.begin(), U' ');
      }
    }
    if (use_regex_) split_each(pieces, split_gpt2);
    // Each UTF-8 byte becomes its printable stand-in character.
    for (Text& piece : pieces) {
      const std::string bytes = u32_to_utf8(piece);
      piece.clear();
      for (unsigned char byte : bytes) piece.push_back(byte_to_char(byte));
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  explicit SplitPreTokenizer(Splitter splitter) : splitter_(splitter) {}
  void split(std::vector<Text>& pieces, bool /*at_start*/) const override {
    split_each(pieces, splitter_);
  }

 private:
  Splitter splitter_;
};

// Whitespace separates and is dropped; each punctuation character is a piece.
class BertPreTokenizer : public PreTokenizer {
 public:
  void split(std::vector<Text>& pieces, bool /*at_start*/) const override {
    std::vector<Text> out;
    for (const Text& piece : pieces) {
      Text word;
      for (char32_t c : piece) {
        const bool punct =
            (c < 0x80 && c > ' ' && c != 0x7F && !is_alphanumeric(c)) || is_punctuation(c);
        if (is_white_space(c) || punct) {
          if (!word.empty()) out.push_back(std::move(word));
          word.clear();
          if (punct) out.emplace_back(1, c);
        } else {
          word += c;
        }
      }
      if (!word.empty()) out.push_back(std::move(word));
    }
    pieces.swap(out);
  }
};

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {}
  void split(std::vector<Text>& pieces, bool at_start) const override {
    std::vector<Text> out;
    for (size_t p = 0; p < pieces.size(); ++p) {
      Text piece = pieces[p];
      for (char32_t& c : piece) {
        if (c == ' ') c = replacement_;
      }
      const bool prepend = scheme_ == PrependScheme::kAlways ||
                           (scheme_ == PrependScheme::kFirst && at_start && p == 0);
      if (prepend && (piece.empty() || piece[0] != replacement_)) {
        piece.insert(piece.begin(), replacement_);
      }
      if (!split_) {
        out.push_back(std::move(piece));
        continue;
      }
      // Each replacement character starts a new piece.
      size_t begin = 0;
      for (size_t i = 1; i <= piece.size(); ++i) {
        if (i == piece.size() || piece[i] == replacement_) {
          out.push_back(piece.substr(begin, i - begin));
          begin = i;
        }
      }
    }
    pieces.swap(out);
  }

 private:
  char32_t replacement_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void split(std::vector<Text>& pieces, bool at_start) const override {
    for (const auto& step : steps_) step->split(pieces, at_start);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

std::vector<Text> split_gpt2(const Text& text) { return split_with(text, gpt2_piece_end); }

std::vector<Text> split_llama3(const Text& text, int max_digits) {
  return split_with(text,
                    [&](const Text& t, size_t i) { return llama3_piece_end(t, i, max_digits); });
}

char32_t metaspace_replacement(const nlohmann::json& spec, const std::string& origin,
                               const std::string& where) {
  const Text replacement = utf8_to_u32(json_string(spec, "replacement", origin, where));
  if (replacement.size() != 1)
    tokenizer_json_error(origin, where + " replacement is not one character");
  return replacement[0];
}

PrependScheme prepend_scheme(const nlohmann::json& spec, const std::string& origin,
                             const std::string& where) {
  // Older files say add_prefix_space instead of prepend_scheme.
  if (!spec.contains("prepend_scheme")) {
    return json_bool(spec, "add_prefix_space", true, origin, where) ? PrependScheme::kAlways
                                                                    : PrependScheme::kNever;
  }
  const std::string scheme = json_string(spec, "prepend_scheme", origin, where);
  if (scheme == "always") return PrependScheme::kAlways;
  if (scheme == "first") return PrependScheme::kFirst;
  if (scheme == "never") return PrependScheme::kNever;
  tokenizer_json_error(origin, where + " has unknown prepend_scheme '" + scheme + "'");
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec,
                                                 const std::string& origin) {
  if (spec.is_null()) return nullptr;
  const std::string type = json_string(spec, "type", origin, "pre_tokenizer");
  const std::string where = "pre_tokenizer " + type;
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(
        json_bool(spec, "add_prefix_space", true, origin, where),
        json_bool(spec, "use_regex", true, origin, where));
  }
  if (type == "Split") {
    const auto& pattern = json_field(spec, "pattern", origin, where);
    const std::string regex =
        pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()
            ? pattern["Regex"].get<std::string>()
            : std::string();
    const std::string behavior = json_string(spec, "behavior", origin, where);
    if (behavior != "Isolated" || json_bool(spec, "invert", false, origin, where)) {
      tokenizer_json_error(origin, where + " with behavior '" + behavior +
                                       "' or invert is not supported (only Isolated)");
    }
    if (regex == kGpt2Pattern) return std::make_unique<SplitPreTokenizer>(split_gpt2);
    if (regex == kLlama3Pattern) return std::make_unique<SplitPreTokenizer>(split_llama3_3);
    if (regex == kQwen2Pattern) return std::make_unique<SplitPreTokenizer>(split_llama3_1);
    if (regex == kPreSplitRegex) return std::make_unique<SplitPreTokenizer>(split_bpe_pieces);
    tokenizer_json_error(origin, where + " pattern " + pattern.dump() +
                                     " is not supported (only GPT-2's, Llama 3's, Qwen2's and "
                                     "accelerate-cpp's BpeTokenizer's)");
  }
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "Metaspace") {
    return std::make_unique<MetaspacePreTokenizer>(metaspace_replacement(spec, origin, where),
                                                   prepend_scheme(spec, origin, where),
                                                   json_bool(spec, "split", true, origin, where));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& step : json_field(spec, "pretokenizers", origin, where)) {
      if (auto made = make_pre_tokenizer(step, origin)) steps.push_back(std::move(made));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  tokenizer_json_error(origin, "unsupported pre_tokenizer type '" + type + "'");
}

}  // namespace accelerate::detail
