// A GPT-2-style decoder-only transformer written with the LibTorch C++
// frontend: token and position embeddings, pre-LayerNorm blocks of causal
// self-attention and a GELU MLP, a final LayerNorm and an output head tied
// to the token embedding, with GPT-2's initialisation. Parameter names
// follow Hugging Face's GPT2LMHeadModel ("transformer.h.0.attn.c_attn.weight"),
// so save_pretrained() writes files that transformers loads (docs/gpt.md).
#pragma once

#include <accelerate/safetensors.h>
#include <accelerate/sequence_parallel.h>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace gpt {

struct GptConfig {
  int64_t vocab_size = 4096;
  int64_t n_positions = 128;  // the longest sequence (context length)
  int64_t n_embd = 128;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  double dropout = 0.0;  // GPT-2's resid_pdrop, embd_pdrop and attn_pdrop, all one value
  double layer_norm_epsilon = 1e-5;
  bool gradient_checkpointing = false;  // recompute each block in backward

  // "tiny" (~1M parameters at vocab 4096, for CI) and "small" (~14M at
  // vocab 8192). Throws std::invalid_argument for another name.
  static GptConfig preset(const std::string& name, int64_t vocab_size);
  // Throws std::invalid_argument naming the bad field.
  void validate() const;
};

// Causal self-attention: one projection to queries, keys and values, and
// one back (GPT-2's attn.c_attn and attn.c_proj).
struct AttentionImpl : torch::nn::Module {
  explicit AttentionImpl(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

  GptConfig config;
  // With sequence parallelism, x holds this rank's tokens and attention runs
  // over the group's whole sequence (Ulysses all-to-alls).
  accelerate::SequenceParallel sequence_parallel;
  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr};
  torch::nn::Dropout resid_dropout{nullptr};
};
TORCH_MODULE(Attention);

// The MLP: 4x wider, GELU (GPT-2's tanh approximation), and back.
struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Linear c_fc{nullptr}, c_proj{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(Mlp);

// x + attn(ln_1(x)), then + mlp(ln_2(.)).
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  Attention attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const GptConfig& config);
  // Logits [batch, tokens, vocab] for token ids [batch, tokens], the first
  // at position `first_position` (a sequence-parallel rank's slice).
  torch::Tensor forward(const torch::Tensor& tokens, int64_t first_position = 0);
  // Mean cross-entropy of predicting targets [batch, tokens] from tokens.
  // With sequence parallelism every rank of the group passes the whole
  // batch, computes its slice of the tokens and returns the group's mean.
  torch::Tensor loss(const torch::Tensor& tokens, const torch::Tensor& targets);
  // Splits sequences over `sp`'s group from now on (Accelerator::
  // sequence_parallel(); a group of one: nothing is split). Error when
  // n_head is not divisible by the group's size.
  void use_sequence_parallel(const accelerate::SequenceParallel& sp);

  GptConfig config;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::ModuleList h{nullptr};  // of Block
  std::vector<Block> blocks;         // the same, typed
  torch::nn::LayerNorm ln_f{nullptr};
  accelerate::SequenceParallel sequence_parallel;
};
TORCH_MODULE(Gpt);

// Parameters, not counting the tied head twice.
int64_t parameter_count(const Gpt& model);

// The state in Hugging Face GPT2LMHeadModel's layout: its names, and its
// Conv1D weights stored [in, out] (the transpose of a Linear's).
accelerate::NamedTensors hf_state_dict(const Gpt& model);
// The same from the model's weights by name (named_parameters' names), e.g.
// accelerator.get_state_dict(model), which gathers ZeRO-3's sharded units.
accelerate::NamedTensors hf_state_dict(const accelerate::NamedTensors& weights);
// GPT-2's config.json for `config`.
std::string hf_config_json(const GptConfig& config);
// Writes directory/model.safetensors and directory/config.json.
void save_pretrained(const Gpt& model, const std::string& directory);
// With the weights given (accelerator.get_state_dict(model) under ZeRO-3).
void save_pretrained(const Gpt& model, const std::string& directory,
                     const accelerate::NamedTensors& weights);
// Reads a directory save_pretrained wrote (or a GPT-2 checkpoint of the same
// layout): the config from config.json, then the weights.
Gpt load_pretrained(const std::string& directory);

}  // namespace gpt
