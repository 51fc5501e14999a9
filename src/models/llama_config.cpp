// read_llama_config / write_llama_config (include/accelerate/models/llama_config.h).
// Key names and defaults follow transformers' LlamaConfig; the rotary
// settings are read from either spelling (4's rope_theta + rope_scaling,
// 5's rope_parameters) and written in 4's, which 5 converts on load.
#include "accelerate/models/llama_config.h"

#include <set>

#include <nlohmann/json.hpp>

#include "accelerate/errors.h"
#include "models/config_json.h"

namespace accelerate::models {
namespace {

using nlohmann::json;

// The keys read_llama_config turns into fields; the rest go to other_keys.
const std::set<std::string> kModelledKeys = {
    "vocab_size",          "hidden_size",         "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim",          "max_position_embeddings",
    "rms_norm_eps",        "rope_theta",          "rope_scaling",      "rope_parameters",
    "tie_word_embeddings", "attention_bias",      "mlp_bias",          "model_type",
    "hidden_act",          "architectures",       "torch_dtype",       "dtype",
    "transformers_version"};

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
  const std::string model_type = reader.text("model_type", "llama");
  if (model_type != "llama") {
    reader.fail("model_type \"" + model_type + "\" is not \"llama\"");
  }
  const std::string act = reader.text("hidden_act", "silu");
  if (act != "silu") reader.fail("hidden_act \"" + act + "\" is not supported (only silu)");

  LlamaConfig config;
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
  config.attention_bias = reader.boolean("attention_bias", false);
  config.mlp_bias = reader.boolean("mlp_bias", false);
  read_rope(reader, config);
  config.other_keys = reader.other_keys(kModelledKeys);
  validate_from(config, reader.path());
  return config;
}

std::string llama_config_json(const LlamaConfig& config, const std::string& dtype) {
  json out = config_json_start(config.other_keys, "llama", "LlamaForCausalLM", dtype);
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
  out["attention_bias"] = config.attention_bias;
  out["mlp_bias"] = config.mlp_bias;
  return out.dump(2) + "\n";
}

void write_llama_config(const LlamaConfig& config, const std::string& directory,
                        const std::string& dtype) {
  config.validate();
  write_config_file(directory, llama_config_json(config, dtype), "write_llama_config");
}

}  // namespace accelerate::models
