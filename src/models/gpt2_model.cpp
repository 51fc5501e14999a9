// The GPT-2 modules (include/accelerate/models/gpt2.h). The arithmetic
// follows transformers' modeling_gpt2.py step for step (Conv1D as addmm with
// [in, out] weights, pre-LayerNorm blocks, learned positions added to the
// token embeddings), so outputs agree with transformers' to fp32 rounding;
// tests/models checks that.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "accelerate/common/errors.h"
#include "accelerate/memory/activation_checkpointing.h"
#include "accelerate/models/gpt2.h"
#include "accelerate/nn/activations.h"
#include "accelerate/nn/attention.h"
#include "accelerate/nn/tensor_parallel.h"
#include "accelerate/sharding/unit_forward.h"
#include "models/parallel_checks.h"
#include "models/sequence_parallel_norm.h"
#include "nn/split_linear.h"

namespace accelerate::models {
namespace {

torch::nn::LayerNorm gpt2_layer_norm(const GPT2Config& config) {
  return torch::nn::LayerNorm(
      torch::nn::LayerNormOptions({config.n_embd}).eps(config.layer_norm_epsilon));
}

// GPT-2's scaled initialisation of the projections that add into the
// residual stream: two per block (attention and MLP).
double gpt2_residual_std(const GPT2Config& config) {
  return config.initializer_range / std::sqrt(2.0 * static_cast<double>(config.n_layer));
}

at::Tensor gpt2_activate(const at::Tensor& x, GPT2Activation activation) {
  switch (activation) {
    case GPT2Activation::kGeluNew:
    case GPT2Activation::kGeluPytorchTanh:
    case GPT2Activation::kGeluFast:
      return gelu(x, GeluApproximation::kTanh);  // the library's fused kernel on CPU
    case GPT2Activation::kGelu:
      return at::gelu(x);
    case GPT2Activation::kRelu:
      return at::relu(x);
    case GPT2Activation::kSilu:
      return at::silu(x);
    case GPT2Activation::kQuickGelu:
      return x * at::sigmoid(x * 1.702);
  }
  throw Error("GPT-2: unknown activation");
}

// Error for a sequence longer than the position embeddings.
void require_positions(int64_t tokens, const GPT2Config& config) {
  if (tokens > config.n_positions) {
    throw Error("GPT-2: " + std::to_string(tokens) + " tokens exceed n_positions " +
                std::to_string(config.n_positions));
  }
}

}  // namespace

GPT2Conv1DImpl::GPT2Conv1DImpl(int64_t in_features, int64_t out_features, double std,
                               int64_t fused_outputs)
    : in_features_(in_features), out_features_(out_features), fused_outputs_(fused_outputs) {
  if (fused_outputs < 1 || out_features % fused_outputs != 0) {
    throw Error("GPT2Conv1D: " + std::to_string(out_features) + " output features are not " +
                std::to_string(fused_outputs) + " equal blocks");
  }
  weight = register_parameter("weight", at::empty({in_features, out_features}).normal_(0.0, std));
  bias = register_parameter("bias", at::zeros({out_features}));
}

accelerate::detail::LinearSplit GPT2Conv1DImpl::split() const {
  return {"GPT2Conv1D", style_,        tp_,           sequence_parallel_,
          in_features_, out_features_, fused_outputs_};
}

void GPT2Conv1DImpl::parallelize(TensorParallelStyle style, const TensorParallel& tp,
                                 bool sequence_parallel) {
  accelerate::detail::check_linear_split(split(), {"GPT2Conv1D", style, tp, sequence_parallel,
                                                   in_features_, out_features_, fused_outputs_});
  style_ = style;
  sequence_parallel_ = sequence_parallel;
  tp_ = tp;
  at::NoGradGuard no_grad;
  for (TensorParallelPart& part : split_parts()) {
    part.tensor.set_data(part_of_whole(part.tensor, part));
  }
}

std::vector<TensorParallelPart> GPT2Conv1DImpl::split_parts() const {
  if (!split().splits()) return {};
  // The [in, out] weight's dimensions are a Linear's swapped.
  if (style_ == TensorParallelStyle::kRowwise) return {{weight, 0, in_features_, tp_}};
  return {{weight, 1, out_features_, tp_, fused_outputs_},
          {bias, 0, out_features_, tp_, fused_outputs_}};
}

at::Tensor GPT2Conv1DImpl::forward(const at::Tensor& x) {
  // The unsplit path (every GPT-2 without tp) builds no LinearSplit: it
  // would copy the group's handle on every call of every projection.
  if (tp_.enabled() && style_ != TensorParallelStyle::kReplicate) {
    return accelerate::detail::split_linear_forward(x, weight.t(), bias, split());
  }
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = weight.size(1);
  return at::addmm(bias, x.reshape({-1, x.size(-1)}), weight).view(shape);
}

GPT2AttentionImpl::GPT2AttentionImpl(const GPT2Config& config, int64_t layer)
    : heads_(config.n_head),
      head_dim_(config.head_dim()),
      // causal_attention divides by sqrt(head_dim) itself.
      query_factor_(config.attention_scaling(layer) *
                    std::sqrt(static_cast<double>(config.head_dim()))),
      attn_pdrop_(config.attn_pdrop),
      resid_pdrop_(config.resid_pdrop) {
  c_attn = register_module("c_attn",
                           GPT2Conv1D(config.n_embd, 3 * config.n_embd, config.initializer_range,
                                      /*fused_outputs=*/3));
  c_proj = register_module("c_proj",
                           GPT2Conv1D(config.n_embd, config.n_embd, gpt2_residual_std(config)));
}

at::Tensor GPT2AttentionImpl::forward(const at::Tensor& x) {
  // This rank's heads: all of them, or 1/tp (c_attn gives each rank whole
  // heads of queries, keys and values), for every token (under Megatron's
  // sequence parallelism c_attn gathers the ranks' tokens).
  const int64_t my_heads = heads_ / tensor_parallel_.size();
  const at::Tensor projected = c_attn(x);
  const int64_t batch = projected.size(0), tokens = projected.size(1);
  const int64_t width = my_heads * head_dim_;
  const auto qkv = projected.split(width, /*dim=*/2);
  auto heads = [&](const at::Tensor& part) {
    return part.view({batch, tokens, my_heads, head_dim_}).transpose(1, 2);
  };
  at::Tensor q = heads(qkv[0]);
  // Exactly 1 in GPT-2's default: no multiplication, no rounding.
  if (query_factor_ != 1.0) q = q * query_factor_;
  const double attention_dropout = is_training() ? attn_pdrop_ : 0.0;
  AttentionOptions options = AttentionOptions().dropout_p(attention_dropout);
  // Split heads draw their own masks (none at all without tp).
  if (attention_dropout > 0)
    options.dropout_generator(split_dropout_generator(tensor_parallel_, q));
  // causal_attention itself for a group of one.
  const at::Tensor attended =
      ulysses_attention(q, heads(qkv[1]), heads(qkv[2]), sequence_parallel_, options);
  const at::Tensor merged = attended.transpose(1, 2).reshape({batch, tokens, width});
  return dropout_between_layers(c_proj(merged), resid_pdrop_, is_training(), tensor_parallel_);
}

GPT2MLPImpl::GPT2MLPImpl(const GPT2Config& config)
    : activation_(config.activation_function), resid_pdrop_(config.resid_pdrop) {
  c_fc = register_module("c_fc",
                         GPT2Conv1D(config.n_embd, config.inner_width(), config.initializer_range));
  c_proj = register_module(
      "c_proj", GPT2Conv1D(config.inner_width(), config.n_embd, gpt2_residual_std(config)));
}

at::Tensor GPT2MLPImpl::forward(const at::Tensor& x) {
  return dropout_between_layers(c_proj(gpt2_activate(c_fc(x), activation_)), resid_pdrop_,
                                is_training(), tensor_parallel_);
}

GPT2BlockImpl::GPT2BlockImpl(const GPT2Config& config, int64_t layer) {
  ln_1 = register_module("ln_1", gpt2_layer_norm(config));
  attn = register_module("attn", GPT2Attention(config, layer));
  ln_2 = register_module("ln_2", gpt2_layer_norm(config));
  mlp = register_module("mlp", GPT2MLP(config));
}

at::Tensor GPT2BlockImpl::forward(const at::Tensor& x) {
  const at::Tensor h = attn(layer_norm_between_layers(ln_1, x, tensor_parallel_)) + x;
  return mlp(layer_norm_between_layers(ln_2, h, tensor_parallel_)) + h;
}

void GPT2BlockImpl::set_tensor_parallel(const TensorParallel& tp) {
  tensor_parallel_ = tp;
  attn->set_tensor_parallel(tp);
  mlp->set_tensor_parallel(tp);
}

GPT2ModelImpl::GPT2ModelImpl(GPT2Config config) : config_(std::move(config)) {
  config_.validate();
  wte = register_module("wte", ParallelEmbedding(config_.vocab_size, config_.n_embd));
  wpe = register_module("wpe", torch::nn::Embedding(config_.n_positions, config_.n_embd));
  h = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < config_.n_layer; ++i) h->push_back(GPT2Block(config_, i));
  ln_f = register_module("ln_f", gpt2_layer_norm(config_));
  at::NoGradGuard no_grad;
  wte->weight.normal_(0.0, config_.initializer_range);
  wpe->weight.normal_(0.0, config_.initializer_range);
}

at::Tensor GPT2ModelImpl::forward(const at::Tensor& input_ids, const at::Tensor& position_ids) {
  const at::Tensor hidden = hidden_part(input_ids, position_ids);
  if (!tensor_parallel_.sequence_parallel()) return hidden;
  return gather_from_tensor_parallel(hidden, tensor_parallel_, /*dim=*/1);
}

at::Tensor GPT2ModelImpl::hidden_part(const at::Tensor& input_ids, const at::Tensor& position_ids) {
  if (input_ids.dim() != 2) {
    throw Error("GPT-2: input_ids must be [batch, tokens], not " + c10::str(input_ids.sizes()));
  }
  const int64_t tokens = input_ids.size(1);
  if (position_ids.defined() && (position_ids.dim() != 1 || position_ids.size(0) != tokens)) {
    throw Error("GPT-2: position_ids must be [" + std::to_string(tokens) + "], not " +
                c10::str(position_ids.sizes()));
  }
  // Positions on a device are not read back (a synchronisation per step):
  // the losses check the whole sequence's length before splitting it.
  const bool check_positions = !position_ids.defined() || position_ids.is_cpu();
  const int64_t end = position_ids.defined() && tokens > 0 && check_positions
                          ? position_ids.max().item<int64_t>() + 1
                          : tokens;
  if (check_positions) require_positions(end, config_);
  const at::Tensor positions = position_ids.defined()
                                   ? position_ids
                                   : at::arange(tokens, input_ids.options().dtype(at::kLong));
  if (tensor_parallel_.sequence_parallel() && tokens % tensor_parallel_.size() != 0) {
    throw Error("GPT-2: " + std::to_string(tokens) + " tokens are not divisible by tp_size " +
                std::to_string(tensor_parallel_.size()) +
                " (tp_sequence_parallel splits them between the layers)");
  }
  // Under sequence parallelism wte reduce-scatters this rank's tokens, and
  // their positions' rows are taken to match (their gradient gathered back:
  // wpe stays whole and alike on every rank).
  at::Tensor position_rows = wpe(positions).unsqueeze(0);
  if (tensor_parallel_.sequence_parallel()) {
    position_rows = scatter_tokens(position_rows, tensor_parallel_);
  }
  at::Tensor x = wte(input_ids) + position_rows;
  x = dropout_between_layers(x, config_.embd_pdrop, is_training(), tensor_parallel_);
  const bool checkpointing = gradient_checkpointing_ && at::GradMode::is_enabled();
  for (size_t i = 0; i < h->size(); ++i) {
    auto block = h->ptr<GPT2BlockImpl>(i);
    // Either call makes the block a ZeRO stage-3 unit when prepare() made
    // it one; checkpointing also drops its activations until backward.
    x = checkpointing ? checkpoint_activations(block, x) : unit_forward(block, x);
  }
  return layer_norm_between_layers(ln_f, x, tensor_parallel_);
}

GPT2LMHeadModelImpl::GPT2LMHeadModelImpl(GPT2Config config) : config_(std::move(config)) {
  transformer = register_module("transformer", GPT2Model(config_));
  if (!config_.tie_word_embeddings) {
    lm_head = register_module(
        "lm_head",
        ParallelLinear(torch::nn::LinearOptions(config_.n_embd, config_.vocab_size).bias(false)));
    at::NoGradGuard no_grad;
    lm_head->weight.normal_(0.0, config_.initializer_range);
  }
}

void GPT2ModelImpl::use_sequence_parallel(const SequenceParallel& sp) {
  if (tensor_parallel_.enabled()) {
    require_divisible_by_group("GPT-2", config_.n_head / tensor_parallel_.size(),
                               "n_head / tp_size", sp.size(), "sp_size");
  }
  require_divisible_by_group("GPT-2", config_.n_head, "n_head", sp.size(), "sp_size");
  sequence_parallel_ = sp;
  for (size_t i = 0; i < h->size(); ++i) h->ptr<GPT2BlockImpl>(i)->attn->set_sequence_parallel(sp);
}

void GPT2ModelImpl::set_tensor_parallel(const TensorParallel& tp) {
  tensor_parallel_ = tp;
  for (size_t i = 0; i < h->size(); ++i) h->ptr<GPT2BlockImpl>(i)->set_tensor_parallel(tp);
}

at::Tensor GPT2LMHeadModelImpl::forward(const at::Tensor& input_ids,
                                        const at::Tensor& position_ids) {
  return gather_from_tensor_parallel(logits_part(input_ids, position_ids), tensor_parallel(), -1);
}

at::Tensor GPT2LMHeadModelImpl::logits_part(const at::Tensor& input_ids,
                                            const at::Tensor& position_ids) {
  // Under sequence parallelism this rank's tokens, which the colwise head
  // gathers (every rank then computes its classes for all of them).
  const at::Tensor hidden = transformer->hidden_part(input_ids, position_ids);
  if (lm_head) return lm_head(hidden);  // colwise: this rank's classes
  // Tied: the embedding's rows are the head's output features, so a split
  // wte is a colwise head.
  return colwise_linear(hidden, transformer->wte->weight, {}, tensor_parallel());
}

TensorParallelPlan GPT2LMHeadModelImpl::tensor_parallel_plan(const GPT2Config& config,
                                                             bool sequence_parallel) {
  std::vector<std::pair<std::string, std::string>> words = {
      {"transformer.wte", "rowwise"},
      {"transformer.h.*.attn.c_attn", "colwise"},
      {"transformer.h.*.attn.c_proj", "rowwise"},
      {"transformer.h.*.mlp.c_fc", "colwise"},
      {"transformer.h.*.mlp.c_proj", "rowwise"},
  };
  if (!config.tie_word_embeddings) words.push_back({"lm_head", "colwise"});
  TensorParallelPlan plan = parse_tensor_parallel_plan(words);
  for (TensorParallelRule& rule : plan) rule.sequence_parallel = sequence_parallel;
  return plan;
}

void GPT2LMHeadModelImpl::parallelize(const TensorParallel& tp) {
  if (tensor_parallel().enabled()) {
    throw Error("GPT-2: the model is split over tp_size " +
                std::to_string(tensor_parallel().size()) + " already");
  }
  require_divisible_by_group("GPT-2", config_.n_head, "n_head", tp.size(), "tp_size");
  require_divisible_by_group("GPT-2", config_.vocab_size,
                             "vocab_size (the logits are gathered whole)", tp.size(), "tp_size");
  const SequenceParallel& sp = transformer->sequence_parallel();
  if (sp.enabled()) {
    require_divisible_by_group("GPT-2", config_.n_head / tp.size(), "n_head / tp_size", sp.size(),
                               "sp_size");
  }
  parallelize_module(*this, tensor_parallel_plan(config_, tp.sequence_parallel()), tp);
  transformer->set_tensor_parallel(tp);
}

CausalLMForward GPT2LMHeadModelImpl::checked_forward(const at::Tensor& input_ids) {
  // The whole sequence's length, checked before a split hides it.
  if (input_ids.dim() == 2) require_positions(input_ids.size(1), config_);
  return [this](const at::Tensor& ids, const at::Tensor& positions) {
    return logits_part(ids, positions);
  };
}

at::Tensor GPT2LMHeadModelImpl::loss(const at::Tensor& input_ids, const at::Tensor& labels) {
  return sequence_parallel_causal_lm_loss(
      checked_forward(input_ids), input_ids, labels, transformer->sequence_parallel(),
      vocab_parallel_token_cross_entropy(config_.vocab_size, tensor_parallel()));
}

at::Tensor GPT2LMHeadModelImpl::loss_on_shifted_labels(const at::Tensor& input_ids,
                                                       const at::Tensor& shift_labels) {
  return sequence_parallel_shifted_causal_lm_loss(
      checked_forward(input_ids), input_ids, shift_labels, transformer->sequence_parallel(),
      vocab_parallel_token_cross_entropy(config_.vocab_size, tensor_parallel()));
}

}  // namespace accelerate::models
