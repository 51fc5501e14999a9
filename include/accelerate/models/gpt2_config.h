// The shape of a GPT-2 model, as Hugging Face's config.json gives it
// (transformers' GPT2Config): read it with read_gpt2_config, write it back
// with write_gpt2_config so transformers' from_pretrained reads what we save.
//
//   auto config = accelerate::models::read_gpt2_config("gpt2/config.json");
//
// Keys this library does not model ("n_ctx", "bos_token_id", the summary_*
// keys of the double-heads model, "task_specific_params", ...) are kept and
// written back unchanged. See docs/models-gpt2.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace accelerate::models {

// The MLP's activation (transformers' activation_function); a closed set:
// others are refused by read_gpt2_config, naming the value.
enum class GPT2Activation {
  kGeluNew,          // "gelu_new": GPT-2's tanh approximation of GELU
  kGeluPytorchTanh,  // "gelu_pytorch_tanh": the same approximation
  kGeluFast,         // "gelu_fast": the same, with a rounded constant
  kGelu,             // "gelu": the exact, erf-based GELU
  kRelu,             // "relu"
  kSilu,             // "silu" (alias "swish")
  kQuickGelu,        // "quick_gelu": x * sigmoid(1.702 x)
};

// Field names and defaults are transformers' GPT2Config's.
struct GPT2Config {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;  // the longest sequence (position embeddings)
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  // The MLP's width. 0 (config.json's null): 4 * n_embd.
  int64_t n_inner = 0;
  GPT2Activation activation_function = GPT2Activation::kGeluNew;
  double resid_pdrop = 0.1;  // after each block's attention and MLP
  double embd_pdrop = 0.1;   // after the embeddings
  double attn_pdrop = 0.1;   // on the attention weights
  double layer_norm_epsilon = 1e-5;
  double initializer_range = 0.02;  // the std of the initial weights
  // Attention logits divided by sqrt(head_dim) (false: not scaled).
  bool scale_attn_weights = true;
  // Layer i's attention logits divided by i + 1 as well.
  bool scale_attn_by_inverse_layer_idx = false;
  // The head is the token embedding matrix (no lm_head parameter).
  bool tie_word_embeddings = true;
  // Keys of the file this library does not model, each with its JSON text,
  // written back by write_gpt2_config.
  std::map<std::string, std::string> other_keys;

  int64_t inner_width() const { return n_inner > 0 ? n_inner : 4 * n_embd; }
  int64_t head_dim() const { return n_embd / n_head; }
  // The factor of layer `layer`'s attention logits q.k (transformers'
  // `scaling`).
  double attention_scaling(int64_t layer) const;
  // Throws accelerate::ConfigError with one line naming the bad field.
  void validate() const;
};

// Reads a config.json (or the folder holding one). Throws ConfigError with
// one line naming the file and the bad key. Refused: a "model_type" other
// than "gpt2", an unknown "activation_function", "reorder_and_upcast_attn"
// or "add_cross_attention" true (neither is implemented), sizes that are not
// positive, n_embd not a multiple of n_head, duplicate keys.
GPT2Config read_gpt2_config(const std::string& path);

// The config as transformers writes it (model_type "gpt2", `architecture`
// in "architectures", n_inner null when it is 0). `dtype`: the
// weights' dtype name ("float32", "bfloat16"); empty keeps the source's.
std::string gpt2_config_json(const GPT2Config& config,
                             const std::string& architecture = "GPT2LMHeadModel",
                             const std::string& dtype = "");
// Writes gpt2_config_json into `directory`/config.json (directory created).
void write_gpt2_config(const GPT2Config& config, const std::string& directory,
                       const std::string& architecture = "GPT2LMHeadModel",
                       const std::string& dtype = "");

const char* to_string(GPT2Activation activation);

}  // namespace accelerate::models
