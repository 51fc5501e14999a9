// Tokenizer (include/accelerate/text/tokenizer.h): reads tokenizer.json and runs
// `tokenizers`' pipeline: added tokens are cut out of the raw text, the rest
// is normalized (then normalized added tokens are cut out), pre-tokenized
// into words, and each word goes through the model; the post-processor adds
// special tokens.
#include "accelerate/text/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_map>

#include "accelerate/common/errors.h"
#include "common/strict_json.h"
#include "text/tokenizer_json_parts.h"
#include "text/truncation.h"
#include "text/unicode.h"

namespace accelerate {

namespace detail {

void tokenizer_json_error(const std::string& origin, const std::string& problem) {
  throw Error("tokenizer.json " + origin + ": " + problem);
}

const nlohmann::json& json_field(const nlohmann::json& object, const char* key,
                                 const std::string& origin, const std::string& where) {
  if (!object.is_object() || !object.contains(key)) {
    tokenizer_json_error(origin, where + " has no '" + key + "'");
  }
  return object[key];
}

std::string json_string(const nlohmann::json& object, const char* key, const std::string& origin,
                        const std::string& where) {
  const auto& value = json_field(object, key, origin, where);
  if (!value.is_string()) tokenizer_json_error(origin, where + " '" + key + "' is not a string");
  return value.get<std::string>();
}

bool json_bool(const nlohmann::json& object, const char* key, bool fallback,
               const std::string& origin, const std::string& where) {
  if (!object.is_object() || !object.contains(key) || object[key].is_null()) return fallback;
  if (!object[key].is_boolean()) {
    tokenizer_json_error(origin, where + " '" + key + "' is not true or false");
  }
  return object[key].get<bool>();
}

}  // namespace detail

namespace detail {

struct JsonAddedToken {
  std::u32string content;
  // What is searched for: the content, normalized for a normalized token (as
  // `tokenizers` matches those in normalized text).
  std::u32string match;
  int32_t id = 0;
  bool lstrip = false, rstrip = false, normalized = false, special = false;
};

// One item of a post-processing template: a text (A or B) or special ids.
struct PostTemplateItem {
  int sequence = -1;  // 0: A, 1: B, -1: special tokens
  std::vector<int32_t> ids;
  int32_t type_id = 0;
};
struct PostTemplate {
  std::vector<PostTemplateItem> single, pair;
};

// A stretch of text still to tokenize, or an added token already found.
struct TextSegment {
  std::u32string text;
  int32_t added_id = -1;
  bool at_start = false;
};

}  // namespace detail

namespace {

using detail::json_bool;
using detail::json_field;
using detail::json_string;
using detail::JsonAddedToken;
using detail::PostTemplate;
using detail::PostTemplateItem;
using detail::TextSegment;
using detail::tokenizer_json_error;

}  // namespace

struct Tokenizer::Impl {
  std::string origin;
  std::unique_ptr<detail::Normalizer> normalizer;
  std::unique_ptr<detail::PreTokenizer> pre_tokenizer;
  std::unique_ptr<detail::Model> model;
  std::unique_ptr<detail::Decoder> decoder;
  std::optional<PostTemplate> post;
  std::vector<JsonAddedToken> added;  // as in the file
  std::unordered_map<int32_t, size_t> added_by_id;
  std::unordered_map<std::string, int32_t> added_by_content;
  // Added tokens matched on the raw text / on normalized text, by first character.
  std::unordered_map<char32_t, std::vector<const JsonAddedToken*>> raw_first, normalized_first;
  int32_t vocab_size = 0;

  // Cuts the added tokens of `index` out of each text segment (leftmost,
  // then longest match; lstrip/rstrip take the whitespace beside a match).
  static std::vector<TextSegment> cut_added(
      const TextSegment& segment,
      const std::unordered_map<char32_t, std::vector<const JsonAddedToken*>>& index) {
    std::vector<TextSegment> out;
    const std::u32string& t = segment.text;
    size_t done = 0;  // end of the last match
    for (size_t i = 0; i < t.size() && !index.empty();) {
      const auto candidates = index.find(t[i]);
      const JsonAddedToken* best = nullptr;
      if (candidates != index.end()) {
        for (const JsonAddedToken* token : candidates->second) {
          const bool fits = t.compare(i, token->match.size(), token->match) == 0;
          if (fits && (!best || token->match.size() > best->match.size())) best = token;
        }
      }
      if (!best) {
        ++i;
        continue;
      }
      size_t start = i, end = i + best->match.size();
      if (best->lstrip) {
        while (start > done && detail::is_white_space(t[start - 1])) --start;
      }
      if (best->rstrip) {
        while (end < t.size() && detail::is_white_space(t[end])) ++end;
      }
      if (start > done) {
        out.push_back({t.substr(done, start - done), -1, segment.at_start && done == 0});
      }
      out.push_back({std::u32string(), best->id, false});
      done = i = end;
    }
    if (done < t.size()) out.push_back({t.substr(done), -1, segment.at_start && done == 0});
    return out;
  }

  // `limit`: stop after the first pre-tokenized word that brings the ids to
  // at least this many, as tokenizers 0.23 does when truncation is on
  // (tokenize_with_limit; added tokens count but never stop it): its
  // truncation then works on these shortened texts.
  std::vector<int32_t> encode_text(std::string_view text,
                                   size_t limit = std::numeric_limits<size_t>::max()) const {
    std::vector<int32_t> ids;
    const TextSegment whole{detail::utf8_to_u32(text), -1, true};
    for (TextSegment& raw : cut_added(whole, raw_first)) {
      if (raw.added_id >= 0) {
        ids.push_back(raw.added_id);
        continue;
      }
      if (normalizer) normalizer->normalize(raw.text);
      for (TextSegment& part : cut_added(raw, normalized_first)) {
        if (part.added_id >= 0) {
          ids.push_back(part.added_id);
          continue;
        }
        std::vector<std::u32string> words{std::move(part.text)};
        if (pre_tokenizer) pre_tokenizer->split(words, part.at_start);
        for (const std::u32string& word : words) {
          if (!word.empty()) model->encode_word(word, ids);
          if (ids.size() >= limit) return ids;
        }
      }
    }
    return ids;
  }

  // The ids the post-processor adds around one text or a pair (what
  // truncation leaves room for).
  size_t special_token_count(bool pair, bool add_special_tokens) const {
    if (!post || !add_special_tokens) return 0;
    size_t count = 0;
    for (const PostTemplateItem& item : pair ? post->pair : post->single) {
      if (item.sequence < 0) count += item.ids.size();
    }
    return count;
  }

  Encoding process(const std::vector<int32_t>& a, const std::vector<int32_t>* b,
                   bool add_special_tokens) const {
    Encoding out;
    if (!post) {
      out.ids = a;
      out.type_ids.assign(a.size(), 0);
      if (b) {
        out.ids.insert(out.ids.end(), b->begin(), b->end());
        out.type_ids.resize(out.ids.size(), 1);
      }
      return out;
    }
    for (const PostTemplateItem& item : b ? post->pair : post->single) {
      if (item.sequence < 0 && !add_special_tokens) continue;
      const std::vector<int32_t>& ids = item.sequence < 0 ? item.ids : item.sequence == 0 ? a : *b;
      out.ids.insert(out.ids.end(), ids.begin(), ids.end());
      out.type_ids.resize(out.ids.size(), item.type_id);
    }
    return out;
  }

  std::string token_of(int32_t id) const {
    if (const auto found = added_by_id.find(id); found != added_by_id.end()) {
      // A normalized token reads back normalized, as `tokenizers` gives it.
      return detail::u32_to_utf8(added[found->second].match);
    }
    const std::string* token = model->id_to_token(id);
    if (!token || (token->empty() && !model->token_to_id(""))) {
      throw Error("Tokenizer(" + origin + "): id " + std::to_string(id) +
                  " is not in the vocabulary of " + std::to_string(vocab_size) + " tokens");
    }
    return *token;
  }
};

namespace {

void read_added_tokens(const nlohmann::json& list, Tokenizer::Impl& impl) {
  if (list.is_null()) return;
  if (!list.is_array()) tokenizer_json_error(impl.origin, "added_tokens is not a list");
  for (const auto& entry : list) {
    const std::string where = "added token";
    JsonAddedToken token;
    const std::string content = json_string(entry, "content", impl.origin, where);
    token.content = detail::utf8_to_u32(content);
    const auto& id = json_field(entry, "id", impl.origin, where + " '" + content + "'");
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= (1u << 30)) {
      tokenizer_json_error(impl.origin, where + " '" + content + "' has no valid id");
    }
    token.id = id.get<int32_t>();
    token.lstrip = json_bool(entry, "lstrip", false, impl.origin, where);
    token.rstrip = json_bool(entry, "rstrip", false, impl.origin, where);
    token.normalized = json_bool(entry, "normalized", false, impl.origin, where);
    token.special = json_bool(entry, "special", false, impl.origin, where);
    if (json_bool(entry, "single_word", false, impl.origin, where)) {
      tokenizer_json_error(impl.origin,
                           where + " '" + content + "' has single_word, not supported");
    }
    if (token.content.empty())
      tokenizer_json_error(impl.origin,
                           where + " with id " + std::to_string(token.id) + " is empty");
    impl.added_by_id[token.id] = impl.added.size();
    impl.added_by_content[content] = token.id;
    impl.added.push_back(std::move(token));
  }
  // Pointers into `added` once it no longer grows.
  for (JsonAddedToken& token : impl.added) {
    token.match = token.content;
    const bool normalized = token.normalized && impl.normalizer;
    if (normalized) impl.normalizer->normalize(token.match);
    if (token.match.empty()) {
      token.match = token.content;  // normalized away: never matches
      continue;
    }
    auto& index = normalized ? impl.normalized_first : impl.raw_first;
    index[token.match[0]].push_back(&token);
  }
}

int32_t special_id(const nlohmann::json& pair, const std::string& origin,
                   const std::string& where) {
  // BertProcessing / RobertaProcessing spell a token as ["[CLS]", 101].
  if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_unsigned()) {
    tokenizer_json_error(origin, where + " token " + pair.dump() + " is not [text, id]");
  }
  return pair[1].get<int32_t>();
}

std::vector<PostTemplateItem> read_template_items(const nlohmann::json& items,
                                                  const nlohmann::json& specials,
                                                  const std::string& origin) {
  const std::string where = "post_processor TemplateProcessing";
  std::vector<PostTemplateItem> out;
  if (!items.is_array()) tokenizer_json_error(origin, where + " template is not a list");
  for (const auto& item : items) {
    PostTemplateItem made;
    if (item.contains("Sequence")) {
      const std::string which = json_string(item["Sequence"], "id", origin, where);
      if (which != "A" && which != "B") tokenizer_json_error(origin, where + " sequence " + which);
      made.sequence = which == "A" ? 0 : 1;
      made.type_id = json_field(item["Sequence"], "type_id", origin, where).get<int32_t>();
    } else if (item.contains("SpecialToken")) {
      const std::string name = json_string(item["SpecialToken"], "id", origin, where);
      const auto& special = json_field(specials, name.c_str(), origin, where + " special_tokens");
      made.ids = json_field(special, "ids", origin, where).get<std::vector<int32_t>>();
      made.type_id = json_field(item["SpecialToken"], "type_id", origin, where).get<int32_t>();
    } else {
      tokenizer_json_error(origin, where + " item " + item.dump() + " is not understood");
    }
    out.push_back(std::move(made));
  }
  return out;
}

// The post-processors become one template; ByteLevel's only changes offsets.
void read_post_processor(const nlohmann::json& spec, Tokenizer::Impl& impl) {
  if (spec.is_null()) return;
  const std::string& origin = impl.origin;
  const std::string type = json_string(spec, "type", origin, "post_processor");
  const std::string where = "post_processor " + type;
  const auto set = [&](PostTemplate made) {
    if (impl.post) tokenizer_json_error(origin, "more than one post_processor adds tokens");
    impl.post = std::move(made);
  };
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    for (const auto& step : json_field(spec, "processors", origin, where)) {
      read_post_processor(step, impl);
    }
  } else if (type == "TemplateProcessing") {
    const auto& specials = json_field(spec, "special_tokens", origin, where);
    set({read_template_items(json_field(spec, "single", origin, where), specials, origin),
         read_template_items(json_field(spec, "pair", origin, where), specials, origin)});
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    const int32_t cls = special_id(json_field(spec, "cls", origin, where), origin, where);
    const int32_t sep = special_id(json_field(spec, "sep", origin, where), origin, where);
    // BERT: [CLS] A [SEP] B [SEP] with B typed 1; RoBERTa: <s> A </s></s> B </s>, all 0.
    const int32_t b_type = type == "BertProcessing" ? 1 : 0;
    PostTemplate made;
    made.single = {{-1, {cls}, 0}, {0, {}, 0}, {-1, {sep}, 0}};
    made.pair = {{-1, {cls}, 0}, {0, {}, 0}, {-1, {sep}, 0}};
    if (type == "RobertaProcessing") made.pair.push_back({-1, {sep}, 0});
    made.pair.push_back({1, {}, b_type});
    made.pair.push_back({-1, {sep}, b_type});
    set(std::move(made));
  } else {
    tokenizer_json_error(origin, "unsupported post_processor type '" + type + "'");
  }
}

}  // namespace

Tokenizer Tokenizer::from_json(const std::string& json_text, const std::string& origin,
                               SavedEncodingSettings saved) {
  StrictJsonProblem problem;
  const auto json = parse_strict_json(json_text, StrictJsonLimits{}, &problem);
  if (!json) tokenizer_json_error(origin, "not valid JSON: " + problem.message);
  if (!json->is_object()) tokenizer_json_error(origin, "not a JSON object");
  auto impl = std::make_unique<Impl>();
  impl->origin = origin;
  try {
    for (const char* key : {"truncation", "padding"}) {
      if (saved == SavedEncodingSettings::kRefuse && json->contains(key) &&
          !(*json)[key].is_null()) {
        tokenizer_json_error(origin, std::string(key) + " settings are not supported");
      }
    }
    const auto component = [&](const char* key) {
      return json->contains(key) ? (*json)[key] : nlohmann::json();
    };
    impl->normalizer = detail::make_normalizer(component("normalizer"), origin);
    impl->pre_tokenizer = detail::make_pre_tokenizer(component("pre_tokenizer"), origin);
    impl->model = detail::make_model(component("model"), origin);
    impl->decoder = detail::make_decoder(component("decoder"), origin);
    read_post_processor(component("post_processor"), *impl);
    read_added_tokens(component("added_tokens"), *impl);
  } catch (const nlohmann::json::exception& e) {
    // A value of the wrong JSON type somewhere the readers did not check.
    tokenizer_json_error(origin, std::string("unexpected value: ") + e.what());
  }
  impl->vocab_size = impl->model->vocab_size();
  for (const JsonAddedToken& token : impl->added) {
    impl->vocab_size = std::max(impl->vocab_size, token.id + 1);
  }
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_file(const std::string& path, SavedEncodingSettings saved) {
  namespace fs = std::filesystem;
  const fs::path file = fs::is_directory(path) ? fs::path(path) / "tokenizer.json" : fs::path(path);
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error("tokenizer.json " + file.string() + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  return from_json(text.str(), file.string(), saved);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return encode_with_types(text, add_special_tokens).ids;
}

Encoding Tokenizer::encode_with_types(std::string_view text, bool add_special_tokens) const {
  return impl_->process(impl_->encode_text(text), nullptr, add_special_tokens);
}

Encoding Tokenizer::encode_pair(std::string_view first, std::string_view second,
                                bool add_special_tokens) const {
  const std::vector<int32_t> b = impl_->encode_text(second);
  return impl_->process(impl_->encode_text(first), &b, add_special_tokens);
}

Encoding Tokenizer::encode_with_types(std::string_view text, const TruncationOptions& truncation,
                                      bool add_special_tokens) const {
  std::vector<int32_t> a = impl_->encode_text(text, detail::tokenize_limit(truncation, 0));
  detail::truncate_sequences(a, nullptr, impl_->special_token_count(false, add_special_tokens),
                             truncation);
  return impl_->process(a, nullptr, add_special_tokens);
}

Encoding Tokenizer::encode_pair(std::string_view first, std::string_view second,
                                const TruncationOptions& truncation,
                                bool add_special_tokens) const {
  std::vector<int32_t> a = impl_->encode_text(first, detail::tokenize_limit(truncation, 0));
  std::vector<int32_t> b = impl_->encode_text(second, detail::tokenize_limit(truncation, 1));
  detail::truncate_sequences(a, &b, impl_->special_token_count(true, add_special_tokens),
                             truncation);
  return impl_->process(a, &b, add_special_tokens);
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (skip_special_tokens) {
      const auto added = impl_->added_by_id.find(id);
      if (added != impl_->added_by_id.end() && impl_->added[added->second].special) continue;
    }
    tokens.push_back(impl_->token_of(id));
  }
  if (impl_->decoder) {
    impl_->decoder->decode_chain(tokens);
    std::string text;
    for (const std::string& token : tokens) text += token;
    return text;
  }
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
  return text;
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const std::string key(token);
  if (const auto found = impl_->added_by_content.find(key);
      found != impl_->added_by_content.end()) {
    return found->second;
  }
  return impl_->model->token_to_id(key);
}

std::string Tokenizer::id_to_token(int32_t id) const { return impl_->token_of(id); }

}  // namespace accelerate
