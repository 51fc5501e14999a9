// GPT-2 as LibTorch modules whose parameter names, layouts and arithmetic
// are transformers' GPT2Model's and GPT2LMHeadModel's, so a Hugging Face
// folder (the hub's gpt2 included) loads into them and what they save loads
// in transformers:
//
//   namespace am = accelerate::models;
//   am::GPT2LMHeadModel model(am::GPT2LMHeadModelImpl::from_pretrained("gpt2"));
//   auto logits = model->forward(input_ids);             // [batch, tokens, vocab]
//   auto loss = model->loss(input_ids, labels);           // labels = input_ids for LM
//   model->save_pretrained("out");                        // config.json + safetensors
//
// Learned position embeddings, pre-LayerNorm blocks of causal self-attention
// (accelerate::causal_attention) and an MLP, a final LayerNorm, and a head
// tied to the token embedding unless the config unties it. The projections
// are GPT-2's Conv1D: weights stored [in, out], the transpose of a Linear's,
// as transformers' files hold them. The blocks run through
// accelerate::unit_forward, so prepare() can make each one a ZeRO stage-3
// unit (FSDP auto-wrap class name "GPT2Block"), and
// set_gradient_checkpointing(true) checkpoints their activations,
// use_sequence_parallel(accelerator.sequence_parallel()) splits every
// sequence over a sequence-parallel group (Ulysses attention), and
// parallelize(tp) splits the layers over a tensor-parallel group
// (tensor_parallel_plan() says how; prepare() calls it at tp_size above 1).
// Dropout
// follows train()/eval() (at tp, the split heads' and tokens' masks are each
// rank's own: split_dropout in accelerate/nn/tensor_parallel.h). No KV cache and no attention mask
// (every sequence of a batch is full). See docs/models-gpt2.md.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <vector>

#include "accelerate/checkpoint/model_saving.h"
#include "accelerate/common/arg.h"
#include "accelerate/models/causal_lm_loss.h"
#include "accelerate/models/gpt2_config.h"
#include "accelerate/nn/parallel_layers.h"
#include "accelerate/nn/sequence_parallel.h"
#include "accelerate/nn/tensor_parallel_plan.h"

namespace accelerate::models {

// transformers' Conv1D: y = x W + b with W of shape [in, out]. Initialised
// with W ~ N(0, std), b = 0. A layer tensor parallelism splits as
// ParallelLinear (the same styles and forward), its weight's dimensions
// swapped: colwise keeps [in, out part] and the bias's part, rowwise
// [in part, out] and the whole bias. `fused_outputs`: the output is that
// many equal blocks, each split alike (c_attn's queries, keys and values: 3,
// so each rank holds whole heads of all three; colwise_rep is refused).
class GPT2Conv1DImpl : public torch::nn::Module, public TensorParallelLayer {
 public:
  GPT2Conv1DImpl(int64_t in_features, int64_t out_features, double std = 0.02,
                 int64_t fused_outputs = 1);
  at::Tensor forward(const at::Tensor& x);

  void parallelize(TensorParallelStyle style, const TensorParallel& tp,
                   bool sequence_parallel = false) override;
  TensorParallelStyle style() const override { return style_; }
  const TensorParallel& tensor_parallel() const override { return tp_; }
  std::vector<TensorParallelPart> split_parts() const override;

  at::Tensor weight;  // [in, out], or this rank's part
  at::Tensor bias;    // [out], or this rank's part (colwise)

 private:
  accelerate::detail::LinearSplit split() const;

  int64_t in_features_, out_features_, fused_outputs_;
  TensorParallelStyle style_ = TensorParallelStyle::kReplicate;
  bool sequence_parallel_ = false;
  TensorParallel tp_;
};
TORCH_MODULE(GPT2Conv1D);

// Causal self-attention: c_attn projects to queries, keys and values (in
// that order along its output), c_proj back; dropout on the attention
// weights (attn_pdrop) and on the output (resid_pdrop).
class GPT2AttentionImpl : public torch::nn::Module {
 public:
  // `layer`: the block's index (scale_attn_by_inverse_layer_idx).
  GPT2AttentionImpl(const GPT2Config& config, int64_t layer);
  // [batch, tokens, n_embd]; with a sequence-parallel group, this rank's
  // tokens, attending over the group's whole sequence.
  at::Tensor forward(const at::Tensor& x);
  // Set by GPT2ModelImpl::use_sequence_parallel (default: a group of one).
  void set_sequence_parallel(const SequenceParallel& sp) { sequence_parallel_ = sp; }
  // Set by GPT2LMHeadModelImpl::parallelize: this rank computes n_head/tp
  // heads (c_attn colwise, c_proj rowwise).
  void set_tensor_parallel(const TensorParallel& tp) { tensor_parallel_ = tp; }
  GPT2Conv1D c_attn{nullptr}, c_proj{nullptr};

 private:
  SequenceParallel sequence_parallel_;
  TensorParallel tensor_parallel_;
  int64_t heads_, head_dim_;
  // What q is multiplied by before causal_attention's 1/sqrt(head_dim), so
  // that the logits get the config's scaling (1 in GPT-2's default).
  double query_factor_;
  double attn_pdrop_, resid_pdrop_;
};
TORCH_MODULE(GPT2Attention);

// dropout(c_proj(act(c_fc(x)))), n_embd -> inner_width() -> n_embd.
class GPT2MLPImpl : public torch::nn::Module {
 public:
  explicit GPT2MLPImpl(const GPT2Config& config);
  at::Tensor forward(const at::Tensor& x);
  // Set by GPT2ModelImpl::set_tensor_parallel (c_fc colwise, c_proj rowwise).
  void set_tensor_parallel(const TensorParallel& tp) { tensor_parallel_ = tp; }
  GPT2Conv1D c_fc{nullptr}, c_proj{nullptr};

 private:
  TensorParallel tensor_parallel_;
  GPT2Activation activation_;
  double resid_pdrop_;
};
TORCH_MODULE(GPT2MLP);

// x + attn(ln_1(x)), then h + mlp(ln_2(h)).
class GPT2BlockImpl : public torch::nn::Module {
 public:
  GPT2BlockImpl(const GPT2Config& config, int64_t layer);
  // Under Megatron's sequence parallelism x is this rank's tokens.
  at::Tensor forward(const at::Tensor& x);
  // Set by GPT2ModelImpl::set_tensor_parallel, for its layers and norms.
  void set_tensor_parallel(const TensorParallel& tp);
  torch::nn::LayerNorm ln_1{nullptr};
  GPT2Attention attn{nullptr};
  torch::nn::LayerNorm ln_2{nullptr};
  GPT2MLP mlp{nullptr};

 private:
  TensorParallel tensor_parallel_;
};
TORCH_MODULE(GPT2Block);

struct GPT2LoadOptions {
  // The parameters' dtype: checkpoint tensors of any floating dtype are
  // converted to it (kFloat: a bf16 checkpoint trains in fp32).
  ACCELERATE_ARG(at::ScalarType, dtype) = at::kFloat;
};

// The transformer without a head. Parameters: wte.weight, wpe.weight,
// h.N.ln_1.{weight,bias}, h.N.attn.c_attn.{weight,bias},
// h.N.attn.c_proj.{weight,bias}, h.N.ln_2.{weight,bias},
// h.N.mlp.c_fc.{weight,bias}, h.N.mlp.c_proj.{weight,bias}, ln_f.{weight,bias}.
class GPT2ModelImpl : public torch::nn::Module {
 public:
  // GPT-2's initialisation, as transformers': weights ~ N(0,
  // initializer_range), the projections into the residual stream (c_proj)
  // with std initializer_range / sqrt(2 n_layer), biases 0, LayerNorms 1
  // and 0. fp32, on the CPU.
  explicit GPT2ModelImpl(GPT2Config config);
  // The final normed hidden states [batch, tokens, n_embd] for token ids
  // [batch, tokens] at `position_ids` [tokens] (undefined: 0..tokens-1;
  // Error at n_positions or beyond). With a sequence-parallel group, each
  // rank passes its slice and the slice's positions (slice_sequence).
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& position_ids = {});
  // forward() before Megatron's sequence parallelism gathers the tokens:
  // this rank's 1/tp of them under it (the tokens must divide by tp), all
  // of them otherwise.
  at::Tensor hidden_part(const at::Tensor& input_ids, const at::Tensor& position_ids = {});

  // Splits sequences over `sp`'s group from now on (every block's
  // attention runs Ulysses all-to-alls; a group of one splits nothing).
  // Error naming both numbers when n_head is not divisible by its size.
  void use_sequence_parallel(const SequenceParallel& sp);
  const SequenceParallel& sequence_parallel() const { return sequence_parallel_; }
  // Set by GPT2LMHeadModelImpl::parallelize (default: a group of one).
  void set_tensor_parallel(const TensorParallel& tp);
  const TensorParallel& tensor_parallel() const { return tensor_parallel_; }

  // Loads a base model's folder or a GPT2LMHeadModel's (its head dropped).
  static std::shared_ptr<GPT2ModelImpl> from_pretrained(const std::string& folder,
                                                        const GPT2LoadOptions& options = {});
  // config.json (architectures ["GPT2Model"]) plus the weights, unprefixed.
  std::vector<std::string> save_pretrained(
      const std::string& folder, const ShardSize& max_shard_size = ShardSize("5GB")) const;

  // Activation checkpointing of every block (transformers'
  // gradient_checkpointing_enable()): while grad mode is on, each block
  // keeps only its input and recomputes its forward in backward (still a
  // ZeRO stage-3 unit). Off by default.
  void set_gradient_checkpointing(bool on) { gradient_checkpointing_ = on; }
  bool gradient_checkpointing() const { return gradient_checkpointing_; }

  const GPT2Config& config() const { return config_; }
  ParallelEmbedding wte{nullptr};  // as torch::nn::Embedding until split
  torch::nn::Embedding wpe{nullptr};
  torch::nn::ModuleList h{nullptr};  // of GPT2Block
  torch::nn::LayerNorm ln_f{nullptr};

 private:
  GPT2Config config_;
  bool gradient_checkpointing_ = false;
  SequenceParallel sequence_parallel_;
  TensorParallel tensor_parallel_;
};
TORCH_MODULE(GPT2Model);

// Parameters: transformer.<GPT2Model's>, and lm_head.weight only when the
// config unties the head (tied, the head is transformer.wte.weight and the
// files hold no lm_head.weight, as transformers').
class GPT2LMHeadModelImpl : public torch::nn::Module, public TensorParallelModel {
 public:
  explicit GPT2LMHeadModelImpl(GPT2Config config);
  // Logits [batch, tokens, vocab] for token ids [batch, tokens] (positions
  // as GPT2ModelImpl::forward's); whole on every rank when split (gathered).
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& position_ids = {});
  // This rank's classes of the logits: tensor_parallel_range(vocab_size, tp)
  // when split, all of them otherwise. The losses use them.
  at::Tensor logits_part(const at::Tensor& input_ids, const at::Tensor& position_ids = {});
  // transformers' causal-LM loss (causal_lm_loss.h): logits at position t
  // predict labels[t+1]; labels of -100 are ignored; the mean, in fp32.
  // With a sequence-parallel group every rank of it passes the whole batch:
  // each computes its slice of the tokens (labels shifted before the
  // split) and all return the group's token mean.
  at::Tensor loss(const at::Tensor& input_ids, const at::Tensor& labels);
  // The same with labels already shifted (transformers' `shift_labels`):
  // position t's logits predict shift_labels[t], as a dataset of windows
  // and their next tokens yields them.
  at::Tensor loss_on_shifted_labels(const at::Tensor& input_ids, const at::Tensor& shift_labels);

  // GPT2ModelImpl::use_sequence_parallel, and the losses above split too.
  void use_sequence_parallel(const SequenceParallel& sp) { transformer->use_sequence_parallel(sp); }

  // The plan: wte by vocabulary (rowwise); per block c_attn colwise (each of
  // queries, keys and values split by heads), attn.c_proj rowwise, c_fc
  // colwise, mlp.c_proj rowwise; an untied lm_head colwise (a tied head is
  // the split wte, a colwise head too); wpe and the LayerNorms whole. The
  // losses take vocab_parallel_cross_entropy over each rank's classes.
  // `sequence_parallel`: every split layer takes Megatron's sequence
  // parallelism (the embeddings' sum, the LayerNorms, the dropouts and the
  // residuals between them run on each rank's 1/tp of the tokens).
  static TensorParallelPlan tensor_parallel_plan(const GPT2Config& config,
                                                 bool sequence_parallel = false);
  // Splits the model over `tp` by that plan (with sequence parallelism
  // where tp.sequence_parallel()). Errors (one line, before any split):
  // n_head or vocab_size not divisible by tp's size; n_head/tp not divisible
  // by a sequence-parallel group's size; a model split already. Under
  // sequence parallelism a sequence whose tokens tp does not divide is
  // refused at forward.
  void parallelize(const TensorParallel& tp) override;
  const TensorParallel& tensor_parallel() const override { return transformer->tensor_parallel(); }

  // Builds the model from `folder`'s config.json and loads its weights:
  // a GPT2LMHeadModel's files ("transformer." names) or a base model's (no
  // prefix, as the hub's gpt2 holds them, with its attn.bias buffers, which
  // are skipped).
  static std::shared_ptr<GPT2LMHeadModelImpl> from_pretrained(const std::string& folder,
                                                              const GPT2LoadOptions& options = {});
  // config.json (architectures ["GPT2LMHeadModel"]) plus the weights
  // (shards above max_shard_size, as transformers' save_pretrained),
  // loadable by from_pretrained here and in transformers. Returns the
  // weight files written. Refused (one line) for a split model: its tensors
  // are parts (Accelerator::save_model gathers them whole).
  std::vector<std::string> save_pretrained(
      const std::string& folder, const ShardSize& max_shard_size = ShardSize("5GB")) const;

  const GPT2Config& config() const { return config_; }
  GPT2Model transformer{nullptr};
  ParallelLinear lm_head{nullptr};  // null when tied; as torch::nn::Linear until split

 private:
  // forward, for the losses, after checking input_ids' length.
  CausalLMForward checked_forward(const at::Tensor& input_ids);
  GPT2Config config_;
};
TORCH_MODULE(GPT2LMHeadModel);

}  // namespace accelerate::models
