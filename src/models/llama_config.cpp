// read_llama_config / write_llama_config (include/accelerate/models/llama_config.h).
// Key names and defaults follow transformers' LlamaConfig; the rotary
// settings are read from either spelling (4's rope_theta + rope_scaling,
// 5's rope_parameters) and written in 4's, which 5 converts on load.
#include "accelerate/models/llama_config.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "accelerate/errors.h"
#include "common/strict_json.h"

namespace accelerate::models {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The keys read_llama_config turns into fields; the rest go to other_keys.
const std::set<std::string> kModelledKeys = {
    "vocab_size",          "hidden_size",         "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim",          "max_position_embeddings",
    "rms_norm_eps",        "rope_theta",          "rope_scaling",      "rope_parameters",
    "tie_word_embeddings", "attention_bias",      "mlp_bias",          "model_type",
    "hidden_act",          "architectures",       "torch_dtype",       "dtype",
    "transformers_version"};

class ConfigReader {
 public:
  ConfigReader(std::string path, const json& root) : path_(std::move(path)), root_(root) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw ConfigError("Llama config '" + path_ + "': " + what);
  }

  int64_t integer(const json& object, const std::string& key, int64_t fallback,
                  const std::string& where = "") const {
    const auto found = object.find(key);
    if (found == object.end() || found->is_null()) return fallback;
    if (!found->is_number_integer()) fail("\"" + where + key + "\" must be an integer");
    return found->get<int64_t>();
  }
  double number(const json& object, const std::string& key, double fallback,
                const std::string& where = "") const {
    const auto found = object.find(key);
    if (found == object.end() || found->is_null()) return fallback;
    if (!found->is_number()) fail("\"" + where + key + "\" must be a number");
    return found->get<double>();
  }
  bool boolean(const json& object, const std::string& key, bool fallback) const {
    const auto found = object.find(key);
    if (found == object.end() || found->is_null()) return fallback;
    if (!found->is_boolean()) fail("\"" + key + "\" must be true or false");
    return found->get<bool>();
  }
  std::string text(const json& object, const std::string& key, const std::string& fallback) const {
    const auto found = object.find(key);
    if (found == object.end() || found->is_null()) return fallback;
    if (!found->is_string()) fail("\"" + key + "\" must be a string");
    return found->get<std::string>();
  }

  // rope_scaling (transformers 4) or rope_parameters (5): {"rope_type" (or
  // the older "type"), "factor", ...}; null or absent means the default.
  void rope(LlamaConfig& config) const {
    config.rope_theta = number(root_, "rope_theta", config.rope_theta);
    const json* section = nullptr;
    std::string name;
    for (const char* key : {"rope_parameters", "rope_scaling"}) {
      const auto found = root_.find(key);
      if (found != root_.end() && !found->is_null()) {
        section = &*found;
        name = key;
        break;
      }
    }
    if (!section) return;
    if (!section->is_object()) fail("\"" + name + "\" must be an object");
    const std::string where = name + ".";
    config.rope_theta = number(*section, "rope_theta", config.rope_theta, where);
    std::string type = text(*section, "rope_type", text(*section, "type", "default"));
    if (type == "default") return;
    if (type != "llama3") {
      fail("rope type \"" + type + "\" is not supported (supported: default, llama3)");
    }
    RopeScaling& scaling = config.rope_scaling;
    scaling.type = RopeType::kLlama3;
    for (const char* key :
         {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
      if (!section->contains(key)) fail("\"" + where + key + "\" is missing (llama3 rope)");
    }
    scaling.factor = number(*section, "factor", scaling.factor, where);
    scaling.low_freq_factor = number(*section, "low_freq_factor", scaling.low_freq_factor, where);
    scaling.high_freq_factor =
        number(*section, "high_freq_factor", scaling.high_freq_factor, where);
    scaling.original_max_position_embeddings =
        integer(*section, "original_max_position_embeddings",
                scaling.original_max_position_embeddings, where);
  }

 private:
  std::string path_;
  const json& root_;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("Llama config: cannot read '" + path + "'");
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
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
    if (value <= 0) {
      throw ConfigError(std::string("Llama config: ") + name + " must be positive, not " +
                        std::to_string(value));
    }
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
  std::string path = path_or_folder;
  if (fs::is_directory(path)) path = (fs::path(path) / "config.json").string();
  StrictJsonProblem problem;
  const auto root = parse_strict_json(read_text(path), StrictJsonLimits{}, &problem);
  if (!root) throw ConfigError("Llama config '" + path + "': " + problem.message);
  if (!root->is_object()) throw ConfigError("Llama config '" + path + "': not a JSON object");
  const ConfigReader reader(path, *root);

  const std::string model_type = reader.text(*root, "model_type", "llama");
  if (model_type != "llama") {
    reader.fail("model_type \"" + model_type + "\" is not \"llama\"");
  }
  const std::string act = reader.text(*root, "hidden_act", "silu");
  if (act != "silu") reader.fail("hidden_act \"" + act + "\" is not supported (only silu)");

  LlamaConfig config;
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads"}) {
    if (!root->contains(key)) reader.fail(std::string("\"") + key + "\" is missing");
  }
  config.vocab_size = reader.integer(*root, "vocab_size", 0);
  config.hidden_size = reader.integer(*root, "hidden_size", 0);
  config.intermediate_size = reader.integer(*root, "intermediate_size", 0);
  config.num_hidden_layers = reader.integer(*root, "num_hidden_layers", 0);
  config.num_attention_heads = reader.integer(*root, "num_attention_heads", 0);
  config.num_key_value_heads = reader.integer(*root, "num_key_value_heads", 0);
  config.head_dim = reader.integer(*root, "head_dim", 0);
  config.max_position_embeddings =
      reader.integer(*root, "max_position_embeddings", config.max_position_embeddings);
  config.rms_norm_eps = reader.number(*root, "rms_norm_eps", config.rms_norm_eps);
  config.tie_word_embeddings = reader.boolean(*root, "tie_word_embeddings", false);
  config.attention_bias = reader.boolean(*root, "attention_bias", false);
  config.mlp_bias = reader.boolean(*root, "mlp_bias", false);
  reader.rope(config);
  for (const auto& [key, value] : root->items()) {
    if (!kModelledKeys.count(key)) config.other_keys[key] = value.dump();
  }
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (root->contains(key)) config.other_keys[key] = (*root)[key].dump();
  }
  try {
    config.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(e.what()) + " (in '" + path + "')");
  }
  return config;
}

std::string llama_config_json(const LlamaConfig& config, const std::string& dtype) {
  json out = json::object();
  for (const auto& [key, text] : config.other_keys) out[key] = json::parse(text);
  if (!dtype.empty()) {
    out["torch_dtype"] = dtype;
    out["dtype"] = dtype;
  }
  out["model_type"] = "llama";
  out["architectures"] = json::array({"LlamaForCausalLM"});
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
  fs::create_directories(directory);
  const std::string path = (fs::path(directory) / "config.json").string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << llama_config_json(config, dtype);
  if (!out.flush()) throw Error("write_llama_config: cannot write '" + path + "'");
}

}  // namespace accelerate::models
