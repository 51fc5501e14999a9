// The shape of a Llama-family model, as Hugging Face's config.json gives it
// (transformers' LlamaConfig): read it with read_llama_config, write it back
// with write_llama_config so transformers' from_pretrained reads what we save.
//
//   auto config = accelerate::models::read_llama_config("Llama-3.2-1B/config.json");
//
// Both spellings of the rotary settings are read: transformers 4's top-level
// "rope_theta" with "rope_scaling" (what published checkpoints carry) and
// transformers 5's "rope_parameters". Keys this library does not model
// (token ids, "architectures", ...) are kept and written back unchanged.
// See docs/models.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace accelerate::models {

// How the rotary embedding's inverse frequencies are made (transformers'
// rope_type). A closed set: other types ("linear", "dynamic", "yarn", ...)
// are refused by read_llama_config, naming the type.
enum class RopeType {
  kDefault,  // inv_freq[i] = 1 / theta^(2i / head_dim)
  kLlama3,   // Llama 3.1's: low frequencies divided by `factor`, a smooth band between
};

struct RopeScaling {
  RopeType type = RopeType::kDefault;
  // kLlama3 only (the values Llama 3.1 ships with as defaults here).
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// Field names and defaults are transformers' LlamaConfig's.
struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  // Grouped-query attention: heads share key/value heads in groups of
  // num_attention_heads / num_key_value_heads. 0 in code: = num_attention_heads.
  int64_t num_key_value_heads = 0;
  // Width of one head. 0: hidden_size / num_attention_heads.
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v/o projections have biases
  bool mlp_bias = false;        // gate/up/down projections have biases
  // Keys of the file this library does not model, each with its JSON text,
  // written back by write_llama_config.
  std::map<std::string, std::string> other_keys;

  int64_t kv_heads() const {
    return num_key_value_heads ? num_key_value_heads : num_attention_heads;
  }
  int64_t head_width() const { return head_dim ? head_dim : hidden_size / num_attention_heads; }
  // Throws accelerate::ConfigError with one line naming the bad field
  // (non-positive sizes, heads not dividing, ...).
  void validate() const;
};

// Reads a config.json (or the folder holding one). Throws ConfigError with
// one line naming the file and the missing or bad key; a "model_type" other
// than "llama" or a "hidden_act" other than "silu" is refused.
LlamaConfig read_llama_config(const std::string& path);

// The config as transformers writes it (model_type "llama", architectures
// ["LlamaForCausalLM"], rope_theta and rope_scaling at the top level, which
// transformers 4 and 5 both read). `dtype`: the weights' dtype name for
// "torch_dtype" / "dtype" ("float32", "bfloat16"); empty keeps the source's.
std::string llama_config_json(const LlamaConfig& config, const std::string& dtype = "");
// Writes llama_config_json into `directory`/config.json (directory created).
void write_llama_config(const LlamaConfig& config, const std::string& directory,
                        const std::string& dtype = "");

const char* rope_type_name(RopeType type);

}  // namespace accelerate::models
