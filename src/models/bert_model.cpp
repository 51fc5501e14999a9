// The BERT modules (include/accelerate/models/bert.h). The arithmetic
// follows transformers' modeling_bert.py step for step (post-LayerNorm
// residual blocks, eager attention with an additive padding mask, exact
// GELU), so outputs agree with transformers' to fp32 rounding; tests/models
// checks that.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "accelerate/common/errors.h"
#include "accelerate/memory/activation_checkpointing.h"
#include "accelerate/models/bert.h"
#include "accelerate/nn/activations.h"
#include "accelerate/nn/attention.h"
#include "accelerate/sharding/unit_forward.h"
#include "models/parallel_checks.h"
#include "models/sequence_parallel_norm.h"

namespace accelerate::models {
namespace {

torch::nn::LayerNorm bert_layer_norm(const BertConfig& config) {
  return torch::nn::LayerNorm(
      torch::nn::LayerNormOptions({config.hidden_size}).eps(config.layer_norm_eps));
}

at::Tensor activate(const at::Tensor& x, BertActivation activation) {
  switch (activation) {
    case BertActivation::kGelu:
      return at::gelu(x);
    case BertActivation::kGeluTanh:
      return gelu(x, GeluApproximation::kTanh);
    case BertActivation::kRelu:
      return at::relu(x);
  }
  throw Error("BERT: unknown activation");
}

// [batch, tokens] inputs must agree with input_ids' shape.
void check_companion(const at::Tensor& input_ids, const at::Tensor& other, const char* name) {
  if (other.defined() && other.sizes() != input_ids.sizes()) {
    throw Error(std::string("BERT: ") + name + " " + c10::str(other.sizes()) +
                " does not match input_ids " + c10::str(input_ids.sizes()));
  }
}

}  // namespace

BertEmbeddingsImpl::BertEmbeddingsImpl(const BertConfig& config)
    : dropout_(config.hidden_dropout_prob) {
  // padding_idx as transformers: the pad token's row gets no gradient.
  word_embeddings = register_module(
      "word_embeddings",
      ParallelEmbedding(torch::nn::EmbeddingOptions(config.vocab_size, config.hidden_size)
                            .padding_idx(config.pad_token_id)));
  position_embeddings =
      register_module("position_embeddings",
                      torch::nn::Embedding(config.max_position_embeddings, config.hidden_size));
  token_type_embeddings = register_module(
      "token_type_embeddings", torch::nn::Embedding(config.type_vocab_size, config.hidden_size));
  LayerNorm = register_module("LayerNorm", bert_layer_norm(config));
}

at::Tensor BertEmbeddingsImpl::forward(const at::Tensor& input_ids,
                                       const at::Tensor& token_type_ids) {
  const int64_t tokens = input_ids.size(1);
  const int64_t max_positions = position_embeddings->weight.size(0);
  if (tokens > max_positions) {
    throw Error("BERT: " + std::to_string(tokens) + " tokens exceed max_position_embeddings " +
                std::to_string(max_positions));
  }
  const at::Tensor positions = at::arange(tokens, input_ids.options().dtype(at::kLong));
  const at::Tensor types =
      token_type_ids.defined() ? token_type_ids : at::zeros_like(input_ids, at::kLong);
  // Under sequence parallelism the word embedding reduce-scatters this
  // rank's tokens, and the other embeddings' rows are taken to match (their
  // gradients gathered back: the tables stay whole and alike on every rank).
  const bool split_tokens = tensor_parallel_.sequence_parallel();
  auto mine = [&](const at::Tensor& rows) {
    return split_tokens ? scatter_tokens(rows, tensor_parallel_) : rows;
  };
  // transformers' order of additions: words + types, then + positions.
  at::Tensor x = word_embeddings(input_ids) + mine(token_type_embeddings(types));
  x = x + mine(position_embeddings(positions).unsqueeze(0));
  return dropout_between_layers(layer_norm_between_layers(LayerNorm, x, tensor_parallel_), dropout_,
                                is_training(), tensor_parallel_);
}

BertSelfAttentionImpl::BertSelfAttentionImpl(const BertConfig& config)
    : heads_(config.num_attention_heads),
      head_dim_(config.head_dim()),
      dropout_(config.attention_probs_dropout_prob) {
  const int64_t width = heads_ * head_dim_;
  query = register_module("query", ParallelLinear(config.hidden_size, width));
  key = register_module("key", ParallelLinear(config.hidden_size, width));
  value = register_module("value", ParallelLinear(config.hidden_size, width));
}

at::Tensor BertSelfAttentionImpl::forward(const at::Tensor& x, const at::Tensor& key_mask) {
  // One input collective for the three (one all-reduce backward, not three;
  // under sequence parallelism one gather of the ranks' tokens).
  const std::vector<at::Tensor> qkv = forward_sharing_input(x, {query, key, value});
  const int64_t batch = qkv[0].size(0), tokens = qkv[0].size(1);
  const int64_t my_heads = heads_ / tensor_parallel_.size();  // all, or 1/tp
  auto heads = [&](const at::Tensor& projected) {
    return projected.view({batch, tokens, my_heads, head_dim_}).transpose(1, 2);
  };
  const at::Tensor q = heads(qkv[0]);
  const double attention_dropout = is_training() ? dropout_ : 0.0;
  AttentionOptions options = AttentionOptions().dropout_p(attention_dropout);
  // Split heads draw their own masks (none at all without tp).
  if (attention_dropout > 0)
    options.dropout_generator(split_dropout_generator(tensor_parallel_, q));
  const at::Tensor attended =
      bidirectional_attention(q, heads(qkv[1]), heads(qkv[2]), key_mask, options);
  return attended.transpose(1, 2).reshape({batch, tokens, my_heads * head_dim_});
}

BertResidualOutputImpl::BertResidualOutputImpl(const BertConfig& config, int64_t in_features)
    : dropout_(config.hidden_dropout_prob) {
  dense = register_module("dense", ParallelLinear(in_features, config.hidden_size));
  LayerNorm = register_module("LayerNorm", bert_layer_norm(config));
}

at::Tensor BertResidualOutputImpl::forward(const at::Tensor& x, const at::Tensor& residual) {
  const at::Tensor branch =
      dropout_between_layers(dense(x), dropout_, is_training(), tensor_parallel_);
  return layer_norm_between_layers(LayerNorm, branch + residual, tensor_parallel_);
}

BertAttentionImpl::BertAttentionImpl(const BertConfig& config) {
  self = register_module("self", BertSelfAttention(config));
  output = register_module("output", BertResidualOutput(config, config.hidden_size));
}

at::Tensor BertAttentionImpl::forward(const at::Tensor& x, const at::Tensor& key_mask) {
  return output(self(x, key_mask), x);
}

BertIntermediateImpl::BertIntermediateImpl(const BertConfig& config)
    : activation_(config.hidden_act) {
  dense = register_module("dense", ParallelLinear(config.hidden_size, config.intermediate_size));
}

at::Tensor BertIntermediateImpl::forward(const at::Tensor& x) {
  return activate(dense(x), activation_);
}

BertLayerImpl::BertLayerImpl(const BertConfig& config) {
  attention = register_module("attention", BertAttention(config));
  intermediate = register_module("intermediate", BertIntermediate(config));
  output = register_module("output", BertResidualOutput(config, config.intermediate_size));
}

at::Tensor BertLayerImpl::forward(const at::Tensor& x, const at::Tensor& key_mask) {
  const at::Tensor h = attention(x, key_mask);
  return output(intermediate(h), h);
}

BertEncoderImpl::BertEncoderImpl(const BertConfig& config) {
  layer = register_module("layer", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) layer->push_back(BertLayer(config));
}

BertPoolerImpl::BertPoolerImpl(const BertConfig& config) {
  dense = register_module("dense", torch::nn::Linear(config.hidden_size, config.hidden_size));
}

at::Tensor BertPoolerImpl::forward(const at::Tensor& hidden) {
  return at::tanh(dense(hidden.select(1, 0)));
}

BertModelImpl::BertModelImpl(BertConfig config) : config_(std::move(config)) {
  config_.validate();
  embeddings = register_module("embeddings", BertEmbeddings(config_));
  encoder = register_module("encoder", BertEncoder(config_));
  pooler = register_module("pooler", BertPooler(config_));
}

BertOutput BertModelImpl::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                  const at::Tensor& token_type_ids) {
  if (input_ids.dim() != 2) {
    throw Error("BERT: input_ids must be [batch, tokens], not " + c10::str(input_ids.sizes()));
  }
  check_companion(input_ids, attention_mask, "attention_mask");
  check_companion(input_ids, token_type_ids, "token_type_ids");
  const bool split_tokens = tensor_parallel_.sequence_parallel();
  if (split_tokens && input_ids.size(1) % tensor_parallel_.size() != 0) {
    throw Error("BERT: " + std::to_string(input_ids.size(1)) +
                " tokens are not divisible by tp_size " + std::to_string(tensor_parallel_.size()) +
                " (tp_sequence_parallel splits them between the layers)");
  }
  at::Tensor x = embeddings(input_ids, token_type_ids);
  // Each layer is a ZeRO stage-3 unit when prepare() made it one.
  const bool checkpointing = gradient_checkpointing_ && at::GradMode::is_enabled();
  for (const auto& child : *encoder->layer) {
    auto layer = child->as<BertLayer>();
    // The mask needs no gradient: kept, not recomputed.
    x = checkpointing ? checkpoint_activations(layer, x, attention_mask)
                      : unit_forward(layer, x, attention_mask);
  }
  // The heads read whole sequences (the pooler its first token).
  if (split_tokens) x = gather_from_tensor_parallel(x, tensor_parallel_, /*dim=*/1);
  return {x, pooler(x)};
}

TensorParallelPlan BertModelImpl::tensor_parallel_plan(bool sequence_parallel) {
  TensorParallelPlan plan = parse_tensor_parallel_plan({
      {"embeddings.word_embeddings", "rowwise"},
      {"encoder.layer.*.attention.self.query", "colwise"},
      {"encoder.layer.*.attention.self.key", "colwise"},
      {"encoder.layer.*.attention.self.value", "colwise"},
      {"encoder.layer.*.attention.output.dense", "rowwise"},
      {"encoder.layer.*.intermediate.dense", "colwise"},
      {"encoder.layer.*.output.dense", "rowwise"},
  });
  for (TensorParallelRule& rule : plan) rule.sequence_parallel = sequence_parallel;
  return plan;
}

void BertModelImpl::parallelize(const TensorParallel& tp) {
  if (tensor_parallel_.enabled()) {
    throw Error("BERT: the model is split over tp_size " + std::to_string(tensor_parallel_.size()) +
                " already");
  }
  require_divisible_by_group("BERT", config_.num_attention_heads, "num_attention_heads", tp.size(),
                             "tp_size");
  parallelize_module(*this, tensor_parallel_plan(tp.sequence_parallel()), tp);
  tensor_parallel_ = tp;
  embeddings->set_tensor_parallel(tp);
  for (const auto& child : *encoder->layer) {
    auto layer = child->as<BertLayer>();
    layer->attention->self->set_tensor_parallel(tp);
    layer->attention->output->set_tensor_parallel(tp);
    layer->output->set_tensor_parallel(tp);
  }
}

at::Tensor mean_pooling(const at::Tensor& hidden, const at::Tensor& attention_mask) {
  if (hidden.dim() != 3 || attention_mask.sizes() != hidden.sizes().slice(0, 2)) {
    throw Error("mean_pooling: hidden " + c10::str(hidden.sizes()) + " and attention_mask " +
                c10::str(attention_mask.sizes()) +
                " do not match ([batch, tokens, hidden], [batch, tokens])");
  }
  // sentence-transformers: sum of the kept tokens / max(their count, 1e-9).
  const at::Tensor mask = attention_mask.unsqueeze(-1).to(hidden.scalar_type());
  return (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9);
}

}  // namespace accelerate::models
