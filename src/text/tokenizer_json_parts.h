// The pipeline stages of a tokenizer.json tokenizer (include/accelerate/
// tokenizer.h): normalizers, pre-tokenizers, models and decoders, each as
// `tokenizers` defines it. Text between stages is UTF-32 so that character
// properties and counts are direct. Internal; LibTorch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace accelerate::detail {

// Throws accelerate::Error "tokenizer.json <origin>: <problem>".
[[noreturn]] void tokenizer_json_error(const std::string& origin, const std::string& problem);

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::u32string& text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits each piece further. `at_start`: the first piece begins the input
  // (Metaspace's "first" prepend scheme asks).
  virtual void split(std::vector<std::u32string>& pieces, bool at_start) const = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one pre-tokenized word.
  virtual void encode_word(const std::u32string& word, std::vector<int32_t>& out) const = 0;
  virtual std::optional<int32_t> token_to_id(const std::string& token) const = 0;
  // nullptr when the model has no such id.
  virtual const std::string* id_to_token(int32_t id) const = 0;
  virtual int32_t vocab_size() const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // One step of `tokenizers`' decode chain: tokens in, tokens out.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Each builder reads one JSON component ("type" and its settings) and throws
// through tokenizer_json_error for an unknown type or setting value; a null
// component gives nullptr.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& origin);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec,
                                                 const std::string& origin);
std::unique_ptr<Model> make_model(const nlohmann::json& spec, const std::string& origin);
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, const std::string& origin);

// GPT-2's and Llama 3's pre-tokenizer regexes, matched by hand: each returns
// the pieces of `text`, which concatenate back to it.
std::vector<std::u32string> split_gpt2(const std::u32string& text);
// max_digits: Llama 3 groups digits by 3 (\p{N}{1,3}), Qwen2 by 1 (\p{N}).
std::vector<std::u32string> split_llama3(const std::u32string& text, int max_digits);

// GPT-2's reversible byte <-> character map of the ByteLevel components.
char32_t byte_to_char(unsigned char byte);
// -1 for a character outside the map.
int char_to_byte(char32_t c);

// Settings several components share: a Replace pattern ({"String": ...}
// only), Metaspace's replacement character and prepend scheme.
enum class PrependScheme { kAlways, kFirst, kNever };
std::u32string replace_pattern(const nlohmann::json& spec, const std::string& origin,
                               const std::string& where);
char32_t metaspace_replacement(const nlohmann::json& spec, const std::string& origin,
                               const std::string& where);
PrependScheme prepend_scheme(const nlohmann::json& spec, const std::string& origin,
                             const std::string& where);

// JSON helpers that word a wrong type as a one-line error.
const nlohmann::json& json_field(const nlohmann::json& object, const char* key,
                                 const std::string& origin, const std::string& where);
std::string json_string(const nlohmann::json& object, const char* key, const std::string& origin,
                        const std::string& where);
bool json_bool(const nlohmann::json& object, const char* key, bool fallback,
               const std::string& origin, const std::string& where);

}  // namespace accelerate::detail
