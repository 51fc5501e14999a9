// Decoders of tokenizer.json files: each a step of `tokenizers`' decode chain.
#include <cctype>
#include <string>
#include <vector>

#include "text/tokenizer_json_parts.h"
#include "text/unicode.h"

namespace accelerate::detail {
namespace {

using Tokens = std::vector<std::string>;

// Byte-level stand-in characters back to bytes; a token with any character
// outside the map keeps its own bytes. Invalid UTF-8 becomes U+FFFD.
class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(Tokens& tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      std::string mapped;
      bool all = true;
      for (char32_t c : utf8_to_u32(token)) {
        const int byte = char_to_byte(c);
        if (byte < 0) {
          all = false;
          break;
        }
        mapped.push_back(static_cast<char>(byte));
      }
      bytes += all ? mapped : token;
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup)
      : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(Tokens& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& token = tokens[i];
      if (i != 0) {
        if (token.compare(0, prefix_.size(), prefix_) == 0) {
          token.erase(0, prefix_.size());
        } else {
          token.insert(0, " ");
        }
      }
      if (cleanup_) token = cleanup(token);
    }
  }

 private:
  // The English detokenization rules of BERT's original decoder.
  static std::string cleanup(std::string text) {
    static const std::pair<const char*, const char*> kRules[] = {
        {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
        {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
        {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (const auto& [from, to] : kRules) text = replace_all(text, from, to);
    return text;
  }

 public:
  static std::string replace_all(const std::string& text, const std::string& from,
                                 const std::string& to) {
    std::string out;
    size_t begin = 0;
    for (size_t at; (at = text.find(from, begin)) != std::string::npos; begin = at + from.size()) {
      out.append(text, begin, at - begin);
      out += to;
    }
    out.append(text, begin, std::string::npos);
    return out;
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

// The replacement character becomes a space; in the first token it is
// dropped instead (it was prepended), unless nothing was prepended.
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool prepended)
      : replacement_(replacement), prepended_(prepended) {}
  void decode_chain(Tokens& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::u32string out;
      for (char32_t c : utf8_to_u32(tokens[i])) {
        if (c != replacement_) {
          out += c;
        } else if (!(i == 0 && prepended_)) {
          out += U' ';
        }
      }
      tokens[i] = u32_to_utf8(out);
    }
  }

 private:
  char32_t replacement_;
  bool prepended_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(Tokens& tokens) const override {
    for (std::string& token : tokens) {
      token = WordPieceDecoder::replace_all(token, pattern_, content_);
    }
  }

 private:
  std::string pattern_, content_;
};

// Runs of <0xNN> tokens become their bytes when those are valid UTF-8, else
// one U+FFFD per byte.
class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(Tokens& tokens) const override {
    Tokens out;
    std::string bytes;
    size_t count = 0;
    const auto flush = [&] {
      if (count == 0) return;
      if (valid_utf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t i = 0; i < count; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear(), count = 0;
    };
    for (std::string& token : tokens) {
      if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>' &&
          std::isxdigit(static_cast<unsigned char>(token[3])) &&
          std::isxdigit(static_cast<unsigned char>(token[4]))) {
        bytes.push_back(static_cast<char>(std::stoi(token.substr(3, 2), nullptr, 16)));
        ++count;
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    tokens.swap(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(Tokens& tokens) const override {
    std::string joined;
    for (const std::string& token : tokens) joined += token;
    tokens.assign(1, joined);
  }
};

// Removes up to `start` leading and `stop` trailing `content` characters.
class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void decode_chain(Tokens& tokens) const override {
    for (std::string& token : tokens) {
      std::u32string text = utf8_to_u32(token);
      size_t begin = 0, end = text.size();
      while (begin < start_ && begin < end && text[begin] == content_) ++begin;
      while (text.size() - end < stop_ && end > begin && text[end - 1] == content_) --end;
      token = u32_to_utf8(std::u32string_view(text).substr(begin, end - begin));
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void decode_chain(Tokens& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

size_t count_field(const nlohmann::json& spec, const char* key, const std::string& origin,
                   const std::string& where) {
  const auto& value = json_field(spec, key, origin, where);
  if (!value.is_number_unsigned())
    tokenizer_json_error(origin, where + " " + key + " is not a count");
  return value.get<size_t>();
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, const std::string& origin) {
  if (spec.is_null()) return nullptr;
  const std::string type = json_string(spec, "type", origin, "decoder");
  const std::string where = "decoder " + type;
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "WordPiece") {
    return std::make_unique<WordPieceDecoder>(
        spec.contains("prefix") ? json_string(spec, "prefix", origin, where) : "##",
        json_bool(spec, "cleanup", true, origin, where));
  }
  if (type == "Metaspace") {
    return std::make_unique<MetaspaceDecoder>(
        metaspace_replacement(spec, origin, where),
        prepend_scheme(spec, origin, where) != PrependScheme::kNever);
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(u32_to_utf8(replace_pattern(spec, origin, where)),
                                            json_string(spec, "content", origin, where));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    const std::u32string content = utf8_to_u32(json_string(spec, "content", origin, where));
    if (content.size() != 1) tokenizer_json_error(origin, where + " content is not one character");
    return std::make_unique<StripDecoder>(content[0], count_field(spec, "start", origin, where),
                                          count_field(spec, "stop", origin, where));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const auto& step : json_field(spec, "decoders", origin, where)) {
      if (auto made = make_decoder(step, origin)) steps.push_back(std::move(made));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  tokenizer_json_error(origin, "unsupported decoder type '" + type + "'");
}

}  // namespace accelerate::detail
