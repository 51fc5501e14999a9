// read_llama_config / write_llama_config (include/accelerate/models/llama_config.h).
// Key names and defaults follow transformers' LlamaConfig; the rotary
// settings are read from either spelling (4's rope_theta + rope_scaling,
// 5's rope_parameters) and written in 4's, which 5 converts on load.
#include "accelerate/models/llama_config.h"

#include <set>

#include <nlohmann/json.hpp>

#include "accelerate/common/errors.h"
#include "models/config_json.h"

namespace accelerate::models {
namespace {

using nlohmann::json;

// The keys read_llama_config turns into fields for every model type; the
// rest go to other_keys.
const std::set<std::string> kModelledKeys = {"vocab_size",
                                             "hidden_size",
                                             "intermediate_size",
                                             "num_hidden_layers",
                                             "num_attention_heads",
                                             "num_key_value_heads",
                                             "head_dim",
                                             "max_position_embeddings",
                                             "rms_norm_eps",
                                             "rope_theta",
                                             "rope_scaling",
                                             "rope_parameters",
                                             "tie_word_embeddings",
                                             "model_type",
                                             "hidden_act",
                                             "architectures",
                                             "torch_dtype",
                                             "dtype",
                                             "transformers_version"};

// And those of one model type only. Qwen2's max_window_layers is read (it
// decides layer_types when the file has none) but kept as it was: the
// layer_types written back say the same.
std::set<std::string> modelled_keys(LlamaModelType type) {
  std::set<std::string> keys = kModelledKeys;
  switch (type) {
    case LlamaModelType::kLlama:
      keys.insert({"attention_bias", "mlp_bias"});
      break;
    case LlamaModelType::kMistral:
      keys.insert("sliding_window");
      break;
    case LlamaModelType::kQwen2:
      keys.insert({"use_sliding_window", "sliding_window", "layer_types"});
      break;
  }
  return keys;
}

const char* architecture_name(LlamaModelType type) {
  switch (type) {
    case LlamaModelType::kLlama:
      return "LlamaForCausalLM";
    case LlamaModelType::kMistral:
      return "MistralForCausalLM";
    case LlamaModelType::kQwen2:
      return "Qwen2ForCausalLM";
  }
  return "?";
}

// sliding_window: a positive integer, or null for none (transformers'
// default when absent: 4096).
std::optional<int64_t> read_window(const ConfigJson& reader) {
  const auto present = reader.root().find("sliding_window");
  if (present != reader.root().end() && present->is_null()) return std::nullopt;
  return reader.integer("sliding_window", 4096);
}

// Mistral: every layer slides when sliding_window is set. Qwen2: only with
// use_sliding_window, on the layers layer_types names "sliding_attention"
// (absent: those from max_window_layers on), as transformers' Qwen2Config.
void read_sliding_windows(const ConfigJson& reader, LlamaConfig& config) {
  if (config.model_type == LlamaModelType::kMistral) {
    config.sliding_window = read_window(reader);
    return;
  }
  if (config.model_type != LlamaModelType::kQwen2) return;
  const std::optional<int64_t> window = read_window(reader);
  if (!reader.boolean("use_sliding_window", false) || !window) return;
  config.sliding_window = window;
  if (const json* types = reader.find("layer_types")) {
    if (!types->is_array()) reader.fail("\"layer_types\" must be a list");
    for (const json& type : *types) {
      const std::string name = type.is_string() ? type.get<std::string>() : type.dump();
      if (name != "full_attention" && name != "sliding_attention") {
        reader.fail("layer_types entry \"" + name +
                    "\" is not \"full_attention\" or \"sliding_attention\"");
      }
      config.sliding_layers.push_back(name == "sliding_attention");
    }
    return;
  }
  const int64_t first_sliding = reader.integer("max_window_layers", 28);
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    config.sliding_layers.push_back(layer >= first_sliding);
  }
}

// rope_scaling (transformers 4) or rope_parameters (5): {"rope_type" (or
// the older "type"), "factor", ...}; null or absent means the default.
void read_rope(const ConfigJson& reader, LlamaConfig& config) {
  config.rope_theta = reader.number("rope_theta", config.rope_theta);
  const json* section = nullptr;
  std::string name;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if ((section = reader.find(key))) {
      name = key;
      break;
    }
  }
  if (!section) return;
  if (!section->is_object()) reader.fail("\"" + name + "\" must be an object");
  const std::string where = name + ".";
  config.rope_theta = reader.number(*section, "rope_theta", config.rope_theta, where);
  std::string type = reader.text(*section, "rope_type", reader.text(*section, "type", "default"));
  if (type == "default") return;
  if (type != "llama3") {
    reader.fail("rope type \"" + type + "\" is not supported (supported: default, llama3)");
  }
  RopeScaling& scaling = config.rope_scaling;
  scaling.type = RopeType::kLlama3;
  for (const char* key :
       {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
    if (!section->contains(key)) reader.fail("\"" + where + key + "\" is missing (llama3 rope)");
  }
  scaling.factor = reader.number(*section, "factor", scaling.factor, where);
  scaling.low_freq_factor =
      reader.number(*section, "low_freq_factor", scaling.low_freq_factor, where);
  scaling.high_freq_factor =
      reader.number(*section, "high_freq_factor", scaling.high_freq_factor, where);
  scaling.original_max_position_embeddings =
      reader.integer(*section, "original_max_position_embeddings",
                     scaling.original_max_position_embeddings, where);
}

}  // namespace

const char* model_type_name(LlamaModelType type) {
  switch (type) {
    case LlamaModelType::kLlama:
      return "llama";
    case LlamaModelType::kMistral:
      return "mistral";
    case LlamaModelType::kQwen2:
      return "qwen2";
  }
  return "?";
}

int64_t LlamaConfig::layer_sliding_window(int64_t layer) const {
  if (!sliding_window) return 0;
  if (sliding_layers.empty()) return *sliding_window;
  return sliding_layers.at(static_cast<size_t>(layer)) ? *sliding_window : 0;
}

const char* rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::kDefault:
      return "default";
    case RopeType::kLlama3:
      return "llama3";
  }
  return "?";
}

void LlamaConfig::validate() const {
  auto positive = [](int64_t value, const char* name) {
    require_positive("Llama config", value, name);
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(kv_heads(), "num_key_value_heads");
  positive(max_position_embeddings, "max_position_embeddings");
  if (num_attention_heads % kv_heads() != 0) {
    throw ConfigError("Llama config: num_attention_heads " + std::to_string(num_attention_heads) +
                      " is not a multiple of num_key_value_heads " + std::to_string(kv_heads()));
  }
  if (head_dim == 0 && hidden_size % num_attention_heads != 0) {
    throw ConfigError("Llama config: hidden_size " + std::to_string(hidden_size) +
                      " is not a multiple of num_attention_heads " +
                      std::to_string(num_attention_heads) + " (and no head_dim is given)");
  }
  if (head_width() <= 0 || head_width() % 2 != 0) {
    throw ConfigError("Llama config: head_dim must be positive and even, not " +
                      std::to_string(head_width()));
  }
  if (model_type != LlamaModelType::kLlama && (attention_bias || mlp_bias)) {
    throw ConfigError(std::string("Llama config: attention_bias and mlp_bias are Llama's; ") +
                      model_type_name(model_type) + " fixes its biases");
  }
  if (sliding_window && *sliding_window <= 0) {
    throw ConfigError("Llama config: sliding_window must be positive, not " +
                      std::to_string(*sliding_window));
  }
  if (!sliding_layers.empty() && static_cast<int64_t>(sliding_layers.size()) != num_hidden_layers) {
    throw ConfigError("Llama config: layer_types has " + std::to_string(sliding_layers.size()) +
                      " entries for " + std::to_string(num_hidden_layers) + " layers");
  }
  if (!(rms_norm_eps > 0) || !(rope_theta > 0)) {
    throw ConfigError("Llama config: rms_norm_eps and rope_theta must be positive");
  }
  if (rope_scaling.type == RopeType::kLlama3 &&
      !(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor &&
        rope_scaling.low_freq_factor > 0 && rope_scaling.factor > 0 &&
        rope_scaling.original_max_position_embeddings > 0)) {
    throw ConfigError(
        "Llama config: llama3 rope needs factor > 0, original_max_position_embeddings > 0 and "
        "high_freq_factor > low_freq_factor > 0");
  }
}

LlamaConfig read_llama_config(const std::string& path_or_folder) {
  const ConfigJson reader("Llama config", path_or_folder);
  LlamaConfig config;
  const std::string model_type = reader.text("model_type", "llama");
  bool known = false;
  for (const auto type :
       {LlamaModelType::kLlama, LlamaModelType::kMistral, LlamaModelType::kQwen2}) {
    if (model_type == model_type_name(type)) {
      config.model_type = type;
      known = true;
    }
  }
  if (!known) {
    reader.fail("model_type \"" + model_type + "\" is not one of llama, mistral, qwen2");
  }
  const std::string act = reader.text("hidden_act", "silu");
  if (act != "silu") reader.fail("hidden_act \"" + act + "\" is not supported (only silu)");

  reader.require({"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                  "num_attention_heads"});
  config.vocab_size = reader.integer("vocab_size", 0);
  config.hidden_size = reader.integer("hidden_size", 0);
  config.intermediate_size = reader.integer("intermediate_size", 0);
  config.num_hidden_layers = reader.integer("num_hidden_layers", 0);
  config.num_attention_heads = reader.integer("num_attention_heads", 0);
  config.num_key_value_heads = reader.integer("num_key_value_heads", 0);
  config.head_dim = reader.integer("head_dim", 0);
  config.max_position_embeddings =
      reader.integer("max_position_embeddings", config.max_position_embeddings);
  config.rms_norm_eps = reader.number("rms_norm_eps", config.rms_norm_eps);
  config.tie_word_embeddings = reader.boolean("tie_word_embeddings", false);
  if (config.model_type == LlamaModelType::kLlama) {
    config.attention_bias = reader.boolean("attention_bias", false);
    config.mlp_bias = reader.boolean("mlp_bias", false);
  }
  read_sliding_windows(reader, config);
  read_rope(reader, config);
  config.other_keys = reader.other_keys(modelled_keys(config.model_type));
  validate_from(config, reader.path());
  return config;
}

std::string llama_config_json(const LlamaConfig& config, const std::string& dtype) {
  json out = config_json_start(config.other_keys, model_type_name(config.model_type),
                               architecture_name(config.model_type), dtype);
  out["hidden_act"] = "silu";
  out["vocab_size"] = config.vocab_size;
  out["hidden_size"] = config.hidden_size;
  out["intermediate_size"] = config.intermediate_size;
  out["num_hidden_layers"] = config.num_hidden_layers;
  out["num_attention_heads"] = config.num_attention_heads;
  out["num_key_value_heads"] = config.kv_heads();
  out["head_dim"] = config.head_width();
  out["max_position_embeddings"] = config.max_position_embeddings;
  out["rms_norm_eps"] = config.rms_norm_eps;
  out["rope_theta"] = config.rope_theta;
  if (config.rope_scaling.type == RopeType::kDefault) {
    out["rope_scaling"] = nullptr;
  } else {
    const RopeScaling& s = config.rope_scaling;
    out["rope_scaling"] = {
        {"rope_type", rope_type_name(s.type)},
        {"factor", s.factor},
        {"low_freq_factor", s.low_freq_factor},
        {"high_freq_factor", s.high_freq_factor},
        {"original_max_position_embeddings", s.original_max_position_embeddings}};
  }
  out["tie_word_embeddings"] = config.tie_word_embeddings;
  const json window = config.sliding_window ? json(*config.sliding_window) : json(nullptr);
  switch (config.model_type) {
    case LlamaModelType::kLlama:
      out["attention_bias"] = config.attention_bias;
      out["mlp_bias"] = config.mlp_bias;
      break;
    case LlamaModelType::kMistral:
      out["sliding_window"] = window;
      break;
    case LlamaModelType::kQwen2: {
      out["use_sliding_window"] = config.sliding_window.has_value();
      out["sliding_window"] = window;
      json types = json::array();
      for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
        types.push_back(config.layer_sliding_window(layer) ? "sliding_attention"
                                                           : "full_attention");
      }
      out["layer_types"] = types;
      break;
    }
  }
  return out.dump(2) + "\n";
}

void write_llama_config(const LlamaConfig& config, const std::string& directory,
                        const std::string& dtype) {
  config.validate();
  write_config_file(directory, llama_config_json(config, dtype), "write_llama_config");
}

}  // namespace accelerate::models
