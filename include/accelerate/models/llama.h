// The Llama family (Llama 2, Llama 3.x, and models of the same layout) as a
// LibTorch module whose parameter names and arithmetic are transformers'
// LlamaForCausalLM's, so a Hugging Face folder loads into it and what it
// saves loads in transformers:
//
//   namespace am = accelerate::models;
//   am::LlamaForCausalLM model(am::LlamaForCausalLMImpl::from_pretrained("Llama-3.2-1B"));
//   auto logits = model->forward(input_ids);             // [batch, tokens, vocab]
//   auto loss = model->loss(input_ids, labels);           // labels = input_ids for LM
//   model->save_pretrained("out");                        // config.json + safetensors
//
// Pre-RMSNorm blocks, rotary position embeddings (transformers' rotate_half
// layout), grouped-query causal attention and a SwiGLU MLP. The decoder
// layers run through accelerate::unit_forward, so prepare() can make each
// one a ZeRO stage-3 unit. No KV cache and no attention mask yet (every
// sequence of a batch is full). See docs/models.md.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <string>

#include "accelerate/arg.h"
#include "accelerate/model_saving.h"
#include "accelerate/models/causal_lm_loss.h"
#include "accelerate/models/llama_config.h"

namespace accelerate::models {

// weight * x / sqrt(mean(x^2) + eps), computed in fp32, as LlamaRMSNorm.
class LlamaRMSNormImpl : public torch::nn::Module {
 public:
  LlamaRMSNormImpl(int64_t width, double eps);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;
  double eps;
};
TORCH_MODULE(LlamaRMSNorm);

// The rotary tables for positions 0..tokens-1: cos and sin of shape
// [tokens, head_dim], in fp32, for the config's rope type.
struct RotaryTables {
  at::Tensor cos;
  at::Tensor sin;
};
// The inverse frequencies (head_dim / 2 of them, fp32) transformers computes.
at::Tensor rope_inverse_frequencies(const LlamaConfig& config);

class LlamaAttentionImpl : public torch::nn::Module {
 public:
  // `layer`: the layer's index, which decides its sliding window
  // (LlamaConfig::layer_sliding_window).
  explicit LlamaAttentionImpl(const LlamaConfig& config, int64_t layer = 0);
  // x: [batch, tokens, hidden]; cos/sin: [tokens, head_dim].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};

 private:
  int64_t heads_, kv_heads_, head_dim_;
  int64_t sliding_window_;  // 0: the whole past
};
TORCH_MODULE(LlamaAttention);

// down_proj(silu(gate_proj(x)) * up_proj(x)).
class LlamaMLPImpl : public torch::nn::Module {
 public:
  explicit LlamaMLPImpl(const LlamaConfig& config);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(LlamaMLP);

class LlamaDecoderLayerImpl : public torch::nn::Module {
 public:
  explicit LlamaDecoderLayerImpl(const LlamaConfig& config, int64_t layer = 0);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  LlamaAttention self_attn{nullptr};
  LlamaMLP mlp{nullptr};
  LlamaRMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(LlamaDecoderLayer);

// The decoder without its head: token ids [batch, tokens] -> the final
// normed hidden states [batch, tokens, hidden].
class LlamaModelImpl : public torch::nn::Module {
 public:
  explicit LlamaModelImpl(const LlamaConfig& config);
  at::Tensor forward(const at::Tensor& input_ids);
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};  // of LlamaDecoderLayer
  LlamaRMSNorm norm{nullptr};
  // cos and sin for `tokens` positions, on `device`.
  RotaryTables rotary(int64_t tokens, const c10::Device& device) const;

 private:
  // The rotary frequencies are computed from it at each forward, not kept
  // as a tensor: a model built inside Accelerator::zero3_init() on a process
  // that receives its weights from the main one computes nothing at
  // construction (prepare() fills parameters and buffers, not other
  // tensors), and transformers saves no such buffer either.
  LlamaConfig config_;
};
TORCH_MODULE(LlamaModel);

struct LlamaLoadOptions {
  // The parameters' dtype: checkpoint tensors of any floating dtype are
  // converted to it (kFloat: a bf16 checkpoint trains in fp32).
  ACCELERATE_ARG(at::ScalarType, dtype) = at::kFloat;
};

// Parameters: model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight,
// ..., model.norm.weight, lm_head.weight (absent from the state dict's files
// when tie_word_embeddings: the head is the embedding then).
class LlamaForCausalLMImpl : public torch::nn::Module {
 public:
  // Random weights (LibTorch's default initialisation), fp32, on the CPU.
  explicit LlamaForCausalLMImpl(LlamaConfig config);
  // Logits [batch, tokens, vocab] for token ids [batch, tokens].
  at::Tensor forward(const at::Tensor& input_ids);
  // transformers' causal-LM loss: logits at position t predict labels[t+1];
  // labels equal to -100 are ignored; the mean over the rest, in fp32.
  at::Tensor loss(const at::Tensor& input_ids, const at::Tensor& labels);

  // Builds the model from `folder`'s config.json and loads its weights.
  static std::shared_ptr<LlamaForCausalLMImpl> from_pretrained(
      const std::string& folder, const LlamaLoadOptions& options = {});
  // config.json plus the weights (shards above max_shard_size, as
  // transformers' save_pretrained), loadable by from_pretrained here and
  // in transformers. Returns the weight files written.
  std::vector<std::string> save_pretrained(
      const std::string& folder, const ShardSize& max_shard_size = ShardSize("5GB")) const;

  const LlamaConfig& config() const { return config_; }
  LlamaModel model{nullptr};
  torch::nn::Linear lm_head{nullptr};

 private:
  LlamaConfig config_;
};
TORCH_MODULE(LlamaForCausalLM);

}  // namespace accelerate::models
