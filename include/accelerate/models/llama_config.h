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
#include <optional>
#include <string>
#include <vector>

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

// The checkpoint families built from these blocks (config.json's
// "model_type"): Mistral adds sliding-window attention and has no biases;
// Qwen2 has q/k/v biases (none on o) and sliding windows on the layers its
// layer_types name. A closed set: other model types are refused.
enum class LlamaModelType { kLlama, kMistral, kQwen2 };

// Field names and defaults are transformers' LlamaConfig's.
struct LlamaConfig {
  LlamaModelType model_type = LlamaModelType::kLlama;
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
  bool attention_bias = false;  // Llama: q/k/v/o projections have biases
  bool mlp_bias = false;        // Llama: gate/up/down projections have biases
  // Sliding-window attention (Mistral's sliding_window; Qwen2's when
  // use_sliding_window): a layer that uses it lets each token see itself and
  // the sliding_window - 1 tokens before it. nullopt: every layer sees the
  // whole past.
  std::optional<int64_t> sliding_window;
  // Qwen2's layer_types: per layer, whether it uses the window ("sliding_
  // attention") or not ("full_attention"). Empty: every layer uses it when
  // sliding_window is set (Mistral's rule).
  std::vector<bool> sliding_layers;
  // Keys of the file this library does not model, each with its JSON text,
  // written back by write_llama_config.
  std::map<std::string, std::string> other_keys;

  int64_t kv_heads() const {
    return num_key_value_heads ? num_key_value_heads : num_attention_heads;
  }
  int64_t head_width() const { return head_dim ? head_dim : hidden_size / num_attention_heads; }
  // Layer `layer`'s window (0: the whole past).
  int64_t layer_sliding_window(int64_t layer) const;
  // Biases of the q/k/v projections and of o (Qwen2: q/k/v only).
  bool qkv_bias() const { return attention_bias || model_type == LlamaModelType::kQwen2; }
  bool output_bias() const { return attention_bias; }
  // Throws accelerate::ConfigError with one line naming the bad field
  // (non-positive sizes, heads not dividing, ...).
  void validate() const;
};

// Reads a config.json (or the folder holding one). Throws ConfigError with
// one line naming the file and the missing or bad key; a "model_type" other
// than "llama", "mistral" or "qwen2", or a "hidden_act" other than "silu",
// is refused.
LlamaConfig read_llama_config(const std::string& path);

// The config as transformers writes it (model_type "llama", architectures
// ["LlamaForCausalLM"], or Mistral's or Qwen2's; rope_theta and
// rope_scaling at the top level, which transformers 4 and 5 both read). `dtype`: the weights' dtype
// name for "torch_dtype" / "dtype" ("float32", "bfloat16"); empty keeps the source's.
std::string llama_config_json(const LlamaConfig& config, const std::string& dtype = "");
// Writes llama_config_json into `directory`/config.json (directory created).
void write_llama_config(const LlamaConfig& config, const std::string& directory,
                        const std::string& dtype = "");

const char* rope_type_name(RopeType type);
// "llama", "mistral", "qwen2".
const char* model_type_name(LlamaModelType type);

}  // namespace accelerate::models
