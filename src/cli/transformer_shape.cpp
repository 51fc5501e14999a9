#include "cli/transformer_shape.h"

#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <sstream>

#include "accelerate/common/errors.h"
#include "common/strict_json.h"

namespace accelerate::cli {
namespace {

// A config.json's keys, read with the file's name in every message.
class ConfigKeys {
 public:
  ConfigKeys(const nlohmann::json& json, std::string path) : json_(json), path_(std::move(path)) {}

  // The first of `names` present; its value must be a whole number >= 1.
  // nullopt when none is present (or it is null, as GPT-2's n_inner may be).
  std::optional<int64_t> optional_count(std::initializer_list<const char*> names) const {
    for (const char* name : names) {
      const auto it = json_.find(name);
      if (it == json_.end() || it->is_null()) continue;
      if (!it->is_number_integer() || it->get<int64_t>() < 1) {
        throw ConfigError(path_ + ": \"" + name + "\" must be a whole number >= 1, got " +
                          it->dump());
      }
      return it->get<int64_t>();
    }
    return std::nullopt;
  }

  int64_t count(std::initializer_list<const char*> names) const {
    if (auto value = optional_count(names)) return *value;
    std::string spelled;
    for (const char* name : names)
      spelled += std::string(spelled.empty() ? "\"" : " or \"") + name + "\"";
    throw ConfigError(path_ + ": no " + spelled + " (a " + family_ + " config needs it)");
  }

  bool flag(const char* name, bool fallback) const {
    const auto it = json_.find(name);
    if (it == json_.end() || it->is_null()) return fallback;
    if (!it->is_boolean())
      throw ConfigError(path_ + ": \"" + name + "\" must be true or false, got " + it->dump());
    return it->get<bool>();
  }

  void set_family(const std::string& family) { family_ = family; }

 private:
  const nlohmann::json& json_;
  std::string path_;
  std::string family_;
};

TransformerFamily family_of(const nlohmann::json& json, const std::string& path) {
  const auto type = json.find("model_type");
  if (type == json.end()) {
    // Without model_type, GPT-2's own key names tell it apart.
    if (json.contains("n_layer") || json.contains("n_embd")) return TransformerFamily::kGpt2;
    throw ConfigError(path + ": no \"model_type\" (gpt2, llama or bert)");
  }
  const std::string name = type->is_string() ? type->get<std::string>() : type->dump();
  if (name == "gpt2") return TransformerFamily::kGpt2;
  if (name == "llama") return TransformerFamily::kLlama;
  if (name == "bert") return TransformerFamily::kBert;
  throw ConfigError(path + ": model_type '" + name +
                    "' is not one the estimate knows (gpt2, llama, bert)");
}

void check_heads(const TransformerShape& shape, const std::string& where) {
  if (shape.hidden % shape.heads != 0) {
    throw ConfigError(where + ": the hidden size " + std::to_string(shape.hidden) +
                      " is not a multiple of the " + std::to_string(shape.heads) + " heads");
  }
  if (shape.heads % shape.kv_heads != 0) {
    throw ConfigError(where + ": " + std::to_string(shape.heads) +
                      " attention heads are not a multiple of the " +
                      std::to_string(shape.kv_heads) + " key/value heads");
  }
}

}  // namespace

const char* family_name(TransformerFamily family) {
  switch (family) {
    case TransformerFamily::kGpt2:
      return "gpt2";
    case TransformerFamily::kLlama:
      return "llama";
    case TransformerFamily::kBert:
      return "bert";
  }
  return "?";
}

TransformerShape transformer_from_config_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot open the config");
  std::stringstream text;
  text << in.rdbuf();
  StrictJsonProblem problem;
  const auto json = parse_strict_json(text.str(), {}, &problem);
  if (!json) throw ConfigError(path + ": not valid JSON (" + problem.message + ")");
  if (!json->is_object()) throw ConfigError(path + ": not a JSON object");
  TransformerShape shape;
  shape.family = family_of(*json, path);
  ConfigKeys keys(*json, path);
  keys.set_family(family_name(shape.family));
  shape.source = path + " (" + family_name(shape.family) + ")";
  shape.layers = keys.count({"n_layer", "num_hidden_layers"});
  shape.hidden = keys.count({"n_embd", "hidden_size"});
  shape.heads = keys.count({"n_head", "num_attention_heads"});
  shape.vocab = keys.count({"vocab_size"});
  const auto positions = keys.optional_count({"n_positions", "max_position_embeddings"});
  shape.kv_heads = shape.heads;
  switch (shape.family) {
    case TransformerFamily::kGpt2:
      // GPT-2's n_inner is null for the usual 4x MLP.
      shape.intermediate =
          keys.optional_count({"n_inner", "intermediate_size"}).value_or(4 * shape.hidden);
      shape.positions = keys.count({"n_positions", "max_position_embeddings"});
      shape.tied_embeddings = keys.flag("tie_word_embeddings", true);
      break;
    case TransformerFamily::kLlama:
      shape.intermediate = keys.count({"intermediate_size", "n_inner"});
      shape.kv_heads = keys.optional_count({"num_key_value_heads"}).value_or(shape.heads);
      // Rotary positions: no embedding table; the context only bounds --seq_len.
      shape.positions = positions.value_or(0);
      shape.tied_embeddings = keys.flag("tie_word_embeddings", false);
      shape.attention_bias = keys.flag("attention_bias", false);
      shape.mlp_bias = keys.flag("mlp_bias", false);
      shape.causal = true;
      break;
    case TransformerFamily::kBert:
      shape.intermediate = keys.count({"intermediate_size", "n_inner"});
      shape.positions = keys.count({"max_position_embeddings", "n_positions"});
      shape.type_vocab = keys.optional_count({"type_vocab_size"}).value_or(2);
      shape.tied_embeddings = true;  // BertModel has no output head
      shape.causal = false;
      break;
  }
  check_heads(shape, path);
  return shape;
}

bool is_gpt_preset_name(const std::string& text, std::string* name) {
  for (const char* preset : {"tiny", "small"}) {
    if (text == std::string("gpt-") + preset) {
      if (name) *name = preset;
      return true;
    }
  }
  return false;
}

TransformerShape gpt_preset(const std::string& name, int64_t vocab) {
  // The same numbers as examples/gpt/presets.cpp (the CLI links no
  // example code; bench/memory/run_estimate_bench.sh compares the counts).
  TransformerShape shape;
  shape.family = TransformerFamily::kGpt2;
  shape.vocab = vocab;
  if (name == "tiny") {
    shape.positions = 128, shape.hidden = 128, shape.layers = 4, shape.heads = 4;
  } else if (name == "small") {
    shape.positions = 256, shape.hidden = 384, shape.layers = 6, shape.heads = 6;
  } else {
    throw ConfigError("unknown GPT preset '" + name + "' (gpt-tiny, gpt-small)");
  }
  shape.kv_heads = shape.heads;
  shape.intermediate = 4 * shape.hidden;
  shape.source = "the GPT example's " + name + " preset";
  return shape;
}

int64_t block_parameters(const TransformerShape& s) {
  const int64_t c = s.hidden, i = s.intermediate;
  switch (s.family) {
    case TransformerFamily::kGpt2:
    case TransformerFamily::kBert:
      // Four C x C projections (q, k, v, out) and the two MLP matrices with
      // their biases, and two LayerNorms (weight and bias each).
      return 4 * c * c + 4 * c + 2 * c * i + i + c + 4 * c;
    case TransformerFamily::kLlama: {
      const int64_t kv = s.kv_heads * (c / s.heads);
      const int64_t attention = 2 * c * c + 2 * c * kv + (s.attention_bias ? 2 * c + 2 * kv : 0);
      const int64_t mlp = 3 * c * i + (s.mlp_bias ? 2 * i + c : 0);
      return attention + mlp + 2 * c;  // two RMSNorm weights
    }
  }
  return 0;
}

int64_t outside_block_parameters(const TransformerShape& s) {
  const int64_t c = s.hidden;
  const int64_t embedding = s.vocab * c;
  switch (s.family) {
    case TransformerFamily::kGpt2:
      return embedding + s.positions * c + 2 * c + (s.tied_embeddings ? 0 : embedding);
    case TransformerFamily::kLlama:
      return embedding + c + (s.tied_embeddings ? 0 : embedding);
    case TransformerFamily::kBert:
      // Word, position and token-type embeddings, their LayerNorm, the pooler.
      return embedding + s.positions * c + s.type_vocab * c + 2 * c + c * c + c;
  }
  return 0;
}

int64_t total_parameters(const TransformerShape& s) {
  return s.layers * block_parameters(s) + outside_block_parameters(s);
}

int64_t largest_layer_parameters(const TransformerShape& s) {
  const int64_t c = s.hidden, i = s.intermediate;
  const int64_t embedding = s.vocab * c;
  switch (s.family) {
    case TransformerFamily::kGpt2:
      return std::max({embedding, s.positions * c, 3 * c * c + 3 * c, c * i + i, i * c + c});
    case TransformerFamily::kLlama: {
      const int64_t bias = s.mlp_bias ? i : 0;
      return std::max({embedding, c * c + (s.attention_bias ? c : 0), c * i + bias});
    }
    case TransformerFamily::kBert:
      return std::max({embedding, s.positions * c, c * c + c, c * i + i, i * c + c});
  }
  return 0;
}

TensorParallelSplit tensor_parallel_split(const TransformerShape& s) {
  const int64_t c = s.hidden, i = s.intermediate;
  const int64_t embedding = s.vocab * c;
  const int64_t heads = s.tied_embeddings ? 0 : embedding;  // an untied head, colwise
  switch (s.family) {
    case TransformerFamily::kGpt2:
    case TransformerFamily::kBert:
      // GPT-2: c_attn (weight and bias), attn.c_proj's weight, c_fc (weight
      // and bias), mlp.c_proj's weight; the two c_proj biases are rowwise.
      // BERT alike: query, key, value and intermediate with their biases,
      // the two output denses' weights. BERT's classifier head stays whole.
      return {4 * c * c + 3 * c + 2 * c * i + i,
              embedding + (s.family == TransformerFamily::kGpt2 ? heads : 0)};
    case TransformerFamily::kLlama: {
      const int64_t kv = s.kv_heads * (c / s.heads);
      // q, k, v, o and the three MLP weights; the colwise biases (q, k, v;
      // gate, up), not o_proj's or down_proj's.
      const int64_t attention = 2 * c * c + 2 * c * kv + (s.attention_bias ? c + 2 * kv : 0);
      return {attention + 3 * c * i + (s.mlp_bias ? 2 * i : 0), embedding + heads};
    }
  }
  return {};
}

ProcessParameters parameters_per_process(const TransformerShape& s, int tp_size) {
  const double block = static_cast<double>(block_parameters(s));
  const double outside = static_cast<double>(outside_block_parameters(s));
  ProcessParameters out{block, outside, 0};
  if (tp_size > 1) {
    const TensorParallelSplit split = tensor_parallel_split(s);
    out.block -= static_cast<double>(split.block) * (1 - 1.0 / tp_size);
    out.outside -= static_cast<double>(split.outside) * (1 - 1.0 / tp_size);
  }
  out.total = static_cast<double>(s.layers) * out.block + out.outside;
  return out;
}

}  // namespace accelerate::cli
