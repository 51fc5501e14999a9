// The shape of a transformer, for `accelerate estimate-memory`'s parameter
// counts and activation estimates: read from a Hugging Face config.json
// (GPT-2, Llama or BERT key names) or taken from the GPT example's presets.
// Torch-free.
#pragma once

#include <cstdint>
#include <string>

namespace accelerate::cli {

// The block layouts the estimate knows; each family's parameters and
// activations are counted from its own layers.
enum class TransformerFamily {
  kGpt2,   // pre-LayerNorm, fused qkv, GELU MLP, learned positions (the GPT example too)
  kLlama,  // pre-RMSNorm, grouped-query attention, SwiGLU MLP, rotary positions
  kBert,   // post-LayerNorm encoder, learned positions and token types, pooler
};

const char* family_name(TransformerFamily family);

struct TransformerShape {
  TransformerFamily family = TransformerFamily::kGpt2;
  std::string source;  // "config.json of gpt2", "GPT preset small"
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;      // Llama's num_key_value_heads; = heads elsewhere
  int64_t intermediate = 0;  // the MLP's inner width
  int64_t vocab = 0;
  int64_t positions = 0;        // the longest sequence (learned embeddings' rows)
  int64_t type_vocab = 0;       // BERT's token types
  bool tied_embeddings = true;  // the output head is the token embedding
  bool attention_bias = true;   // Llama: attention_bias (false by default)
  bool mlp_bias = true;         // Llama: mlp_bias (false by default)
  bool causal = true;           // decoder (masked) attention; BERT attends everywhere
};

// Reads `path`, a config.json. Throws accelerate::ConfigError with one line
// naming the file and the missing or bad key.
TransformerShape transformer_from_config_json(const std::string& path);

// The GPT example's presets (examples/gpt/presets.cpp, gpt::preset_config):
// "tiny" and "small", with the example's vocabulary. nullopt-like: throws
// ConfigError for another name.
TransformerShape gpt_preset(const std::string& name, int64_t vocab);

// Whether `text` names a preset ("gpt-tiny", "gpt-small"); sets *name.
bool is_gpt_preset_name(const std::string& text, std::string* name);

// Parameters of one block (a ZeRO stage-3 unit), of everything outside the
// blocks (embeddings, final norm, untied head, pooler), and of the largest
// single layer (DeepSpeed's largest_layer_params: one module's own tensors).
int64_t block_parameters(const TransformerShape& shape);
int64_t outside_block_parameters(const TransformerShape& shape);
int64_t largest_layer_parameters(const TransformerShape& shape);
int64_t total_parameters(const TransformerShape& shape);

// The parameters the library's tensor-parallel plans split
// (docs/tensor-parallel.md): of one block (the projections, and the biases
// of colwise ones), and outside the blocks (the vocabulary-split token
// embedding, an untied head). The rest (norms, positions, rowwise biases,
// BERT's pooler) stay whole on every process.
struct TensorParallelSplit {
  int64_t block = 0;
  int64_t outside = 0;
};
TensorParallelSplit tensor_parallel_split(const TransformerShape& shape);

// One process's parameters at tp `tp_size`: the split ones 1/tp, the rest
// whole; in a block, outside the blocks, and in all.
struct ProcessParameters {
  double block = 0;
  double outside = 0;
  double total = 0;
};
ProcessParameters parameters_per_process(const TransformerShape& shape, int tp_size);

}  // namespace accelerate::cli
