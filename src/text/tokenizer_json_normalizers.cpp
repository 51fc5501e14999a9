// Normalizers of tokenizer.json files, each as `tokenizers` defines it.
#include <string>
#include <vector>

#include "text/tokenizer_json_parts.h"
#include "text/unicode.h"

namespace accelerate::detail {
namespace {

// BERT's whitespace: tab, newline and return, plus Unicode White_Space.
bool bert_whitespace(char32_t c) { return is_white_space(c); }

// Control characters (categories C*) other than tab, newline and return.
bool bert_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const Category k = category_of(c);
  return k == Category::kCc || k == Category::kCf || k == Category::kCn || k == Category::kCo ||
         k == Category::kCs;
}

// The CJK ideograph blocks BERT surrounds with spaces.
bool chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool chinese, bool strip_accents, bool lowercase)
      : clean_text_(clean_text),
        chinese_(chinese),
        strip_accents_(strip_accents),
        lowercase_(lowercase) {}

  void normalize(std::u32string& text) const override {
    std::u32string out;
    out.reserve(text.size());
    for (char32_t c : text) {
      if (clean_text_) {
        if (c == 0 || c == 0xFFFD || bert_control(c)) continue;
        if (bert_whitespace(c)) c = ' ';
      }
      if (chinese_ && chinese_char(c)) {
        out += U' ';
        out += c;
        out += U' ';
      } else {
        out += c;
      }
    }
    if (strip_accents_) {
      std::u32string decomposed = nfd(out);
      out.clear();
      for (char32_t c : decomposed) {
        if (!is_mark_nonspacing(c)) out += c;
      }
    }
    if (lowercase_) {
      std::u32string lower;
      lower.reserve(out.size());
      for (char32_t c : out) append_lowercase(c, lower);
      out.swap(lower);
    }
    text.swap(out);
  }

 private:
  bool clean_text_, chinese_, strip_accents_, lowercase_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::u32string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::u32string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::u32string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::u32string pattern, std::u32string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::u32string& text) const override {
    std::u32string out;
    size_t from = 0;
    for (size_t at; (at = text.find(pattern_, from)) != std::u32string::npos;) {
      out.append(text, from, at - from);
      out += content_;
      from = at + pattern_.size();
    }
    out.append(text, from, std::u32string::npos);
    text.swap(out);
  }

 private:
  std::u32string pattern_, content_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(std::u32string& text) const override {
    std::u32string lower;
    lower.reserve(text.size());
    for (char32_t c : text) append_lowercase(c, lower);
    text.swap(lower);
  }
};

class NfdNormalizer : public Normalizer {
 public:
  void normalize(std::u32string& text) const override { text = nfd(text); }
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  void normalize(std::u32string& text) const override {
    for (const auto& step : steps_) step->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

// A Replace pattern is {"String": s} or {"Regex": r}; only plain strings are
// implemented (the files this reader targets use those).
std::u32string replace_pattern(const nlohmann::json& spec, const std::string& origin,
                               const std::string& where) {
  const auto& pattern = json_field(spec, "pattern", origin, where);
  if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string()) {
    tokenizer_json_error(origin, where + " pattern " + pattern.dump() +
                                     " is not supported (only {\"String\": ...})");
  }
  std::u32string text = utf8_to_u32(pattern["String"].get<std::string>());
  if (text.empty()) tokenizer_json_error(origin, where + " pattern is empty");
  return text;
}

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& origin) {
  if (spec.is_null()) return nullptr;
  const std::string type = json_string(spec, "type", origin, "normalizer");
  const std::string where = "normalizer " + type;
  if (type == "BertNormalizer") {
    const bool lowercase = json_bool(spec, "lowercase", true, origin, where);
    // strip_accents null means "as lowercase" (BERT's uncased models).
    const bool strip_accents = spec.contains("strip_accents") && !spec["strip_accents"].is_null()
                                   ? json_bool(spec, "strip_accents", false, origin, where)
                                   : lowercase;
    return std::make_unique<BertNormalizer>(
        json_bool(spec, "clean_text", true, origin, where),
        json_bool(spec, "handle_chinese_chars", true, origin, where), strip_accents, lowercase);
  }
  if (type == "Prepend") {
    return std::make_unique<PrependNormalizer>(
        utf8_to_u32(json_string(spec, "prepend", origin, where)));
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(
        replace_pattern(spec, origin, where),
        utf8_to_u32(json_string(spec, "content", origin, where)));
  }
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "NFD") return std::make_unique<NfdNormalizer>();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& step : json_field(spec, "normalizers", origin, where)) {
      if (auto made = make_normalizer(step, origin)) steps.push_back(std::move(made));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  tokenizer_json_error(origin, "unsupported normalizer type '" + type + "'");
}

}  // namespace accelerate::detail
