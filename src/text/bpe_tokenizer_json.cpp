// BpeTokenizer as Hugging Face's tokenizer.json: a byte-level BPE whose
// pre-tokenizer is this tokenizer's pre-split, written as a Split regex
// (pre_split.h), so that `tokenizers`, transformers and our tokenizer.json
// reader give the ids encode() gives. This is what makes a model trained on
// a BpeTokenizer (examples/gpt) a Hugging Face folder other tools load.
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accelerate/common/errors.h"
#include "accelerate/text/bpe_tokenizer.h"
#include "common/replace_file.h"
#include "text/pre_split.h"
#include "text/tokenizer_json_parts.h"
#include "text/unicode.h"

namespace accelerate {
namespace {

// A token's bytes in the ByteLevel alphabet (each byte a printable stand-in).
std::string byte_level_text(const std::string& bytes) {
  std::u32string text;
  for (unsigned char byte : bytes) text.push_back(detail::byte_to_char(byte));
  return detail::u32_to_utf8(text);
}

// ByteLevel with neither a prefix space nor GPT-2's regex: the bytes alone.
nlohmann::ordered_json byte_level_step() {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", false}};
}

}  // namespace

void BpeTokenizer::save_tokenizer_json(const std::string& path) const {
  const std::string caller = "BpeTokenizer::save_tokenizer_json";
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  std::map<std::string, int32_t> first_of;  // a token's text -> its first id
  for (int32_t id = 0; id < end_of_text_id(); ++id) {
    const std::string text = byte_level_text(token_bytes(id));
    const auto [found, is_new] = first_of.emplace(text, id);
    if (!is_new) {
      throw Error(caller + ": tokens " + std::to_string(found->second) + " and " +
                  std::to_string(id) +
                  " stand for the same bytes; a tokenizer.json vocabulary holds each token once");
    }
    vocab[text] = id;
  }
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  for (const auto& [left, right] : merges_) {
    merges.push_back(nlohmann::ordered_json::array(
        {byte_level_text(token_bytes(left)), byte_level_text(token_bytes(right))}));
  }
  using Json = nlohmann::ordered_json;
  Json end_of_text = {{"id", end_of_text_id()}, {"content", std::string(kEndOfText)},
                      {"single_word", false},   {"lstrip", false},
                      {"rstrip", false},        {"normalized", false},
                      {"special", true}};
  Json split = {{"type", "Split"},
                {"pattern", {{"Regex", detail::kPreSplitRegex}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  Json pre_tokenizer = {{"type", "Sequence"},
                        {"pretokenizers", Json::array({split, byte_level_step()})}};
  Json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merges}};
  Json file = Json::object();
  file["version"] = "1.0";
  file["truncation"] = nullptr;
  file["padding"] = nullptr;
  file["added_tokens"] = Json::array({end_of_text});
  file["normalizer"] = nullptr;
  file["pre_tokenizer"] = pre_tokenizer;
  file["post_processor"] = nullptr;
  file["decoder"] = byte_level_step();
  file["model"] = model;
  detail::replace_file(path, file.dump(2) + "\n", caller);
}

}  // namespace accelerate
