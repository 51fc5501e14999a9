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
// one a ZeRO stage-3 unit, and use_sequence_parallel(accelerator.
// sequence_parallel()) splits every sequence over a sequence-parallel group
// (Ulysses attention), and parallelize(tp) splits the layers over a
// tensor-parallel group (heads, MLP features and vocabulary). No KV cache and
// no attention mask yet (every sequence of a batch is full). See
// docs/models.md and docs/tensor-parallel.md.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <string>

#include "accelerate/checkpoint/model_saving.h"
#include "accelerate/common/arg.h"
#include "accelerate/models/causal_lm_loss.h"
#include "accelerate/models/llama_config.h"
#include "accelerate/nn/parallel_layers.h"
#include "accelerate/nn/sequence_parallel.h"
#include "accelerate/nn/tensor_parallel_plan.h"

namespace accelerate::models {

// weight * x / sqrt(mean(x^2) + eps), computed in fp32, as LlamaRMSNorm.
class LlamaRMSNormImpl : public torch::nn::Module {
 public:
  LlamaRMSNormImpl(int64_t width, double eps);
  at::Tensor forward(const at::Tensor& x);
  // Set by LlamaForCausalLMImpl::parallelize. Under Megatron's sequence
  // parallelism each rank normalises its own tokens, so the weight's
  // gradient is summed over the group in backward: every rank then holds
  // the whole gradient, as a parameter whole on every rank must.
  void set_tensor_parallel(const TensorParallel& tp) { tensor_parallel_ = tp; }
  at::Tensor weight;
  double eps;

 private:
  TensorParallel tensor_parallel_;
};
TORCH_MODULE(LlamaRMSNorm);

// The rotary tables for a run of positions: cos and sin of shape
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
  // x: [batch, tokens, hidden]; cos/sin: [tokens, head_dim]. With a
  // sequence-parallel group, this rank's tokens (and their positions'
  // tables), attending over the group's whole sequence. Under tensor
  // parallelism's sequence parallelism x is this rank's 1/tp of those
  // tokens, and so is the result (cos/sin are all of them).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
  // Set by LlamaModelImpl::use_sequence_parallel (default: a group of one).
  void set_sequence_parallel(const SequenceParallel& sp) { sequence_parallel_ = sp; }
  // Set by LlamaForCausalLMImpl::parallelize: this rank computes 1/tp of
  // the heads (q/k/v colwise, o_proj rowwise).
  void set_tensor_parallel(const TensorParallel& tp) { tensor_parallel_ = tp; }
  ParallelLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};

 private:
  SequenceParallel sequence_parallel_;
  TensorParallel tensor_parallel_;
  int64_t heads_, kv_heads_, head_dim_;
  int64_t sliding_window_;  // 0: the whole past
};
TORCH_MODULE(LlamaAttention);

// down_proj(silu(gate_proj(x)) * up_proj(x)).
class LlamaMLPImpl : public torch::nn::Module {
 public:
  explicit LlamaMLPImpl(const LlamaConfig& config);
  at::Tensor forward(const at::Tensor& x);
  ParallelLinear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
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
// normed hidden states [batch, tokens, hidden]. Under tensor parallelism's
// sequence parallelism (TensorParallel::sequence_parallel) the embedding,
// the norms and the residuals between the split layers run on each rank's
// 1/tp of the tokens, and forward() gathers the hidden states whole.
class LlamaModelImpl : public torch::nn::Module {
 public:
  explicit LlamaModelImpl(const LlamaConfig& config);
  // `position_ids` [tokens]: the tokens' positions (undefined:
  // 0..tokens-1); with a sequence-parallel group, each rank passes its
  // slice and the slice's positions.
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& position_ids = {});
  // forward() before that gather: under sequence parallelism this rank's
  // tokens [batch, tokens / tp, hidden] (tp must divide the tokens; one-line
  // error), else the same as forward(). For a head that gathers the tokens
  // itself (a colwise one).
  at::Tensor hidden_part(const at::Tensor& input_ids, const at::Tensor& position_ids = {});
  ParallelEmbedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};  // of LlamaDecoderLayer
  LlamaRMSNorm norm{nullptr};
  // cos and sin for positions 0..tokens-1, on `device`.
  RotaryTables rotary(int64_t tokens, const c10::Device& device) const;
  // cos and sin for `positions` [tokens] (any integer dtype), on their device.
  RotaryTables rotary(const at::Tensor& positions) const;

  // Activation checkpointing of every decoder layer (transformers'
  // gradient_checkpointing_enable()): while grad mode is on, each layer
  // keeps only its input and recomputes its forward in backward (still a
  // ZeRO stage-3 unit). Off by default.
  void set_gradient_checkpointing(bool on) { gradient_checkpointing_ = on; }
  bool gradient_checkpointing() const { return gradient_checkpointing_; }

  // Splits sequences over `sp`'s group from now on (every layer's attention
  // runs Ulysses all-to-alls; a group of one splits nothing). Error naming
  // both numbers when the heads of this rank (num_attention_heads / tp) are
  // not divisible by its size.
  void use_sequence_parallel(const SequenceParallel& sp);
  const SequenceParallel& sequence_parallel() const { return sequence_parallel_; }
  // Set by LlamaForCausalLMImpl::parallelize (default: a group of one).
  void set_tensor_parallel(const TensorParallel& tp);
  const TensorParallel& tensor_parallel() const { return tensor_parallel_; }

 private:
  // The rotary frequencies are computed from it at each forward, not kept
  // as a tensor: a model built inside Accelerator::zero3_init() on a process
  // that receives its weights from the main one computes nothing at
  // construction (prepare() fills parameters and buffers, not other
  // tensors), and transformers saves no such buffer either.
  LlamaConfig config_;
  SequenceParallel sequence_parallel_;
  TensorParallel tensor_parallel_;
  bool gradient_checkpointing_ = false;
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
class LlamaForCausalLMImpl : public torch::nn::Module, public TensorParallelModel {
 public:
  // Random weights (LibTorch's default initialisation), fp32, on the CPU.
  explicit LlamaForCausalLMImpl(LlamaConfig config);
  // Logits [batch, tokens, vocab] for token ids [batch, tokens] (positions
  // as LlamaModelImpl::forward's).
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& position_ids = {});
  // transformers' causal-LM loss: logits at position t predict labels[t+1];
  // labels equal to -100 are ignored; the mean over the rest, in fp32.
  // With a sequence-parallel group every rank of it passes the whole batch:
  // each computes its slice of the tokens (labels shifted before the
  // split) and all return the group's token mean.
  at::Tensor loss(const at::Tensor& input_ids, const at::Tensor& labels);
  // The same with labels already shifted (transformers' `shift_labels`):
  // position t's logits predict shift_labels[t].
  at::Tensor loss_on_shifted_labels(const at::Tensor& input_ids, const at::Tensor& shift_labels);

  // LlamaModelImpl::use_sequence_parallel, and the losses above split too.
  void use_sequence_parallel(const SequenceParallel& sp) { model->use_sequence_parallel(sp); }

  // The family's tensor-parallel plan, transformers' (its config's
  // base_model_tp_plan under "model.", with lm_head colwise: the losses
  // take the vocab-parallel cross-entropy over each rank's classes) with the
  // embedding split by vocabulary: q/k/v, gate and up colwise; o_proj and
  // down rowwise; the norms whole. A tied head is the embedding's rows.
  // `sequence_parallel`: every split layer takes Megatron's sequence
  // parallelism (the activations between them split along tokens).
  static TensorParallelPlan tensor_parallel_plan(const LlamaConfig& config,
                                                 bool sequence_parallel = false);
  // Splits the model over `tp` by that plan, on weights every rank of the
  // group holds whole and alike (built from one seed or loaded): the
  // attention heads, key/value heads and MLP features are split; forward()
  // gathers the logits whole, the losses never do. With
  // tp.sequence_parallel() the plan's sequence-parallel form: the norms and
  // residuals hold 1/tp of the tokens, whose count tp must then divide
  // (checked at each forward). Errors (one line, before anything is
  // split) naming the sizes: heads, key/value heads, or (the logits being
  // gathered) vocab_size not divisible by tp; the model split already.
  void parallelize(const TensorParallel& tp) override;
  const TensorParallel& tensor_parallel() const override { return model->tensor_parallel(); }

  // Builds the model from `folder`'s config.json and loads its weights.
  static std::shared_ptr<LlamaForCausalLMImpl> from_pretrained(
      const std::string& folder, const LlamaLoadOptions& options = {});
  // config.json plus the weights (shards above max_shard_size, as
  // transformers' save_pretrained), loadable by from_pretrained here and
  // in transformers. Returns the weight files written. Refused for a model
  // split by parallelize() (its tensors are parts).
  std::vector<std::string> save_pretrained(
      const std::string& folder, const ShardSize& max_shard_size = ShardSize("5GB")) const;

  const LlamaConfig& config() const { return config_; }
  LlamaModel model{nullptr};
  ParallelLinear lm_head{nullptr};

 private:
  // This rank's classes of the logits (all of them when not split).
  at::Tensor logits_part(const at::Tensor& input_ids, const at::Tensor& position_ids);
  CausalLMForward forward_function();  // logits_part, for the losses
  // The losses' cross-entropy: vocab-parallel over a split model's parts.
  TokenCrossEntropy cross_entropy_function() const;
  LlamaConfig config_;
};
TORCH_MODULE(LlamaForCausalLM);

}  // namespace accelerate::models
