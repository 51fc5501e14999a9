// The Llama modules (include/accelerate/models/llama.h). The arithmetic
// follows transformers' modeling_llama.py step for step (fp32 RMSNorm,
// rotate_half rotary, repeat_kv for grouped-query attention), so logits agree
// with transformers' to fp32 rounding; tests/models checks that.
#include "accelerate/models/llama.h"

#include <ATen/ATen.h>

#include "accelerate/common/errors.h"
#include "accelerate/memory/activation_checkpointing.h"
#include "accelerate/models/pretrained.h"
#include "accelerate/nn/activations.h"
#include "accelerate/nn/attention.h"
#include "accelerate/nn/rms_norm.h"
#include "accelerate/nn/rotary_embedding.h"
#include "accelerate/sharding/unit_forward.h"
#include "models/config_json.h"
#include "models/parallel_checks.h"
#include "models/pretrained_build.h"

namespace accelerate::models {
namespace {

constexpr double kPi = 3.14159265358979323846;

ParallelLinear projection(int64_t in, int64_t out, bool bias) {
  return ParallelLinear(torch::nn::LinearOptions(in, out).bias(bias));
}

// [batch, kv_heads, tokens, d] -> [batch, kv_heads * groups, tokens, d],
// each key/value head repeated for the query heads of its group.
at::Tensor repeat_kv(const at::Tensor& x, int64_t groups) {
  if (groups == 1) return x;
  const auto b = x.size(0), h = x.size(1), t = x.size(2), d = x.size(3);
  return x.unsqueeze(2).expand({b, h, groups, t, d}).reshape({b, h * groups, t, d});
}

}  // namespace

at::Tensor rope_inverse_frequencies(const LlamaConfig& config) {
  const int64_t dim = config.head_width();
  // As transformers: exponents in fp32, theta ** exponent in fp32.
  const at::Tensor exponents = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / dim;
  at::Tensor inv_freq = at::pow(config.rope_theta, exponents).reciprocal();
  if (config.rope_scaling.type == RopeType::kDefault) return inv_freq;

  // Llama 3.1: wavelengths longer than original/low_freq_factor are slowed
  // by `factor`; shorter than original/high_freq_factor are kept; between,
  // a linear blend in original/wavelength.
  const RopeScaling& s = config.rope_scaling;
  const double original = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = original / s.low_freq_factor;
  const double high_freq_wavelen = original / s.high_freq_factor;
  const at::Tensor wavelen = (2 * kPi) / inv_freq;
  at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  const at::Tensor smooth =
      (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  const at::Tensor medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return at::where(medium, smoothed, scaled);
}

LlamaRMSNormImpl::LlamaRMSNormImpl(int64_t width, double eps_) : eps(eps_) {
  weight = register_parameter("weight", at::ones({width}));
}

at::Tensor LlamaRMSNormImpl::forward(const at::Tensor& x) {
  if (!tensor_parallel_.sequence_parallel()) return rms_norm(x, weight, eps);
  return rms_norm(x, copy_to_tensor_parallel(weight, tensor_parallel_), eps);
}

LlamaAttentionImpl::LlamaAttentionImpl(const LlamaConfig& config, int64_t layer)
    : heads_(config.num_attention_heads),
      kv_heads_(config.kv_heads()),
      head_dim_(config.head_width()),
      sliding_window_(config.layer_sliding_window(layer)) {
  const bool bias = config.qkv_bias();
  q_proj = register_module("q_proj", projection(config.hidden_size, heads_ * head_dim_, bias));
  k_proj = register_module("k_proj", projection(config.hidden_size, kv_heads_ * head_dim_, bias));
  v_proj = register_module("v_proj", projection(config.hidden_size, kv_heads_ * head_dim_, bias));
  o_proj = register_module(
      "o_proj", projection(heads_ * head_dim_, config.hidden_size, config.output_bias()));
}

at::Tensor LlamaAttentionImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                       const at::Tensor& sin) {
  // q, k and v read x through one collective (under sequence parallelism,
  // every rank's tokens gathered: `tokens` counts them all).
  const std::vector<at::Tensor> projected = forward_sharing_input(x, {q_proj, k_proj, v_proj});
  const int64_t batch = projected[0].size(0), tokens = projected[0].size(1);
  // [batch, tokens, count, d]: the projection's layout, where the rotation
  // runs on contiguous rows; then heads before tokens for attention.
  auto heads = [&](const at::Tensor& projected, int64_t count) {
    return projected.view({batch, tokens, count, head_dim_});
  };
  // This rank's heads: all of them, or 1/tp (whole groups of query heads
  // with their key/value head, as tp divides both counts).
  const int64_t my_heads = heads_ / tensor_parallel_.size();
  const int64_t my_kv_heads = kv_heads_ / tensor_parallel_.size();
  // cos/sin [tokens, d] broadcast over batch and heads.
  const at::Tensor q = rotary_embedding(heads(projected[0], my_heads), cos, sin).transpose(1, 2);
  const at::Tensor k = rotary_embedding(heads(projected[1], my_kv_heads), cos, sin).transpose(1, 2);
  const at::Tensor v = heads(projected[2], my_kv_heads).transpose(1, 2);
  const int64_t groups = heads_ / kv_heads_;
  // The scale is 1/sqrt(head_dim), transformers' `scaling`. Keys and values
  // are repeated per query head before a sequence-parallel split, so the
  // all-to-alls give each rank whole groups (causal_attention itself for a
  // group of one).
  const at::Tensor attended =
      ulysses_attention(q, repeat_kv(k, groups), repeat_kv(v, groups), sequence_parallel_,
                        AttentionOptions().sliding_window(sliding_window_));
  return o_proj(attended.transpose(1, 2).reshape({batch, tokens, my_heads * head_dim_}));
}

LlamaMLPImpl::LlamaMLPImpl(const LlamaConfig& config) {
  const bool bias = config.mlp_bias;
  gate_proj =
      register_module("gate_proj", projection(config.hidden_size, config.intermediate_size, bias));
  up_proj =
      register_module("up_proj", projection(config.hidden_size, config.intermediate_size, bias));
  down_proj =
      register_module("down_proj", projection(config.intermediate_size, config.hidden_size, bias));
}

at::Tensor LlamaMLPImpl::forward(const at::Tensor& x) {
  const std::vector<at::Tensor> gate_up = forward_sharing_input(x, {gate_proj, up_proj});
  return down_proj(silu_mul(gate_up[0], gate_up[1]));
}

LlamaDecoderLayerImpl::LlamaDecoderLayerImpl(const LlamaConfig& config, int64_t layer) {
  self_attn = register_module("self_attn", LlamaAttention(config, layer));
  mlp = register_module("mlp", LlamaMLP(config));
  input_layernorm =
      register_module("input_layernorm", LlamaRMSNorm(config.hidden_size, config.rms_norm_eps));
  post_attention_layernorm = register_module("post_attention_layernorm",
                                             LlamaRMSNorm(config.hidden_size, config.rms_norm_eps));
}

at::Tensor LlamaDecoderLayerImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                          const at::Tensor& sin) {
  const at::Tensor h = x + self_attn(input_layernorm(x), cos, sin);
  return h + mlp(post_attention_layernorm(h));
}

LlamaModelImpl::LlamaModelImpl(const LlamaConfig& config) : config_(config) {
  config.validate();
  embed_tokens =
      register_module("embed_tokens", ParallelEmbedding(config.vocab_size, config.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_hidden_layers; ++i)
    layers->push_back(LlamaDecoderLayer(config, i));
  norm = register_module("norm", LlamaRMSNorm(config.hidden_size, config.rms_norm_eps));
}

RotaryTables LlamaModelImpl::rotary(int64_t tokens, const c10::Device& device) const {
  return rotary(at::arange(tokens, at::TensorOptions(device).dtype(at::kLong)));
}

RotaryTables LlamaModelImpl::rotary(const at::Tensor& positions) const {
  const at::Tensor inv_freq = rope_inverse_frequencies(config_).to(positions.device());
  const at::Tensor freqs = positions.to(at::kFloat).unsqueeze(-1) * inv_freq.unsqueeze(0);
  const at::Tensor angles = at::cat({freqs, freqs}, -1);
  return {angles.cos(), angles.sin()};
}

at::Tensor LlamaModelImpl::forward(const at::Tensor& input_ids, const at::Tensor& position_ids) {
  const at::Tensor hidden = hidden_part(input_ids, position_ids);
  if (!tensor_parallel_.sequence_parallel()) return hidden;
  return gather_from_tensor_parallel(hidden, tensor_parallel_, /*dim=*/1);
}

at::Tensor LlamaModelImpl::hidden_part(const at::Tensor& input_ids,
                                       const at::Tensor& position_ids) {
  if (input_ids.dim() != 2) {
    throw Error("Llama: input_ids must be [batch, tokens], not " + c10::str(input_ids.sizes()));
  }
  if (position_ids.defined() &&
      (position_ids.dim() != 1 || position_ids.size(0) != input_ids.size(1))) {
    throw Error("Llama: position_ids must be [" + std::to_string(input_ids.size(1)) + "], not " +
                c10::str(position_ids.sizes()));
  }
  if (tensor_parallel_.sequence_parallel() && input_ids.size(1) % tensor_parallel_.size() != 0) {
    throw Error("Llama: " + std::to_string(input_ids.size(1)) +
                " tokens are not divisible by tp_size " + std::to_string(tensor_parallel_.size()) +
                " (tp_sequence_parallel splits them between the layers)");
  }
  at::Tensor x = embed_tokens(input_ids);
  const RotaryTables rope = position_ids.defined() ? rotary(position_ids.to(x.device()))
                                                   : rotary(input_ids.size(1), x.device());
  // transformers casts cos and sin to the activations' dtype.
  const at::Tensor cos = rope.cos.to(x.scalar_type()), sin = rope.sin.to(x.scalar_type());
  // Each layer is a ZeRO stage-3 unit when prepare() made it one; the
  // rotary tables need no gradient (kept, not recomputed).
  const bool checkpointing = gradient_checkpointing_ && at::GradMode::is_enabled();
  for (const auto& child : *layers) {
    auto layer = child->as<LlamaDecoderLayer>();
    x = checkpointing ? checkpoint_activations(layer, x, cos, sin)
                      : unit_forward(layer, x, cos, sin);
  }
  return norm(x);
}

void LlamaModelImpl::use_sequence_parallel(const SequenceParallel& sp) {
  if (tensor_parallel_.enabled()) {
    require_divisible_by_group("Llama", config_.num_attention_heads / tensor_parallel_.size(),
                               "num_attention_heads / tp_size", sp.size(), "sp_size");
  } else {
    require_divisible_by_group("Llama", config_.num_attention_heads, "num_attention_heads",
                               sp.size(), "sp_size");
  }
  sequence_parallel_ = sp;
  for (const auto& child : *layers) {
    child->as<LlamaDecoderLayer>()->self_attn->set_sequence_parallel(sp);
  }
}

void LlamaModelImpl::set_tensor_parallel(const TensorParallel& tp) {
  tensor_parallel_ = tp;
  for (const auto& child : *layers) {
    auto layer = child->as<LlamaDecoderLayer>();
    layer->self_attn->set_tensor_parallel(tp);
    layer->input_layernorm->set_tensor_parallel(tp);
    layer->post_attention_layernorm->set_tensor_parallel(tp);
  }
  norm->set_tensor_parallel(tp);
}

LlamaForCausalLMImpl::LlamaForCausalLMImpl(LlamaConfig config) : config_(std::move(config)) {
  model = register_module("model", LlamaModel(config_));
  // Tied: the head is the embedding matrix and has no name of its own, as
  // transformers' files have no lm_head.weight then.
  if (!config_.tie_word_embeddings) {
    lm_head = register_module("lm_head",
                              projection(config_.hidden_size, config_.vocab_size, /*bias=*/false));
  }
}

at::Tensor LlamaForCausalLMImpl::forward(const at::Tensor& input_ids,
                                         const at::Tensor& position_ids) {
  return gather_from_tensor_parallel(logits_part(input_ids, position_ids), tensor_parallel(), -1);
}

at::Tensor LlamaForCausalLMImpl::logits_part(const at::Tensor& input_ids,
                                             const at::Tensor& position_ids) {
  // Under sequence parallelism this rank's tokens, which the colwise head
  // gathers (every rank then computes its classes for all of them).
  const at::Tensor hidden = model->hidden_part(input_ids, position_ids);
  if (lm_head) return lm_head(hidden);  // colwise: this rank's classes
  // Tied: the embedding's rows are the head's output features, so a split
  // embedding is a colwise head.
  return colwise_linear(hidden, model->embed_tokens->weight, {}, tensor_parallel());
}

TensorParallelPlan LlamaForCausalLMImpl::tensor_parallel_plan(const LlamaConfig& config,
                                                              bool sequence_parallel) {
  std::vector<std::pair<std::string, std::string>> words = {
      {"model.embed_tokens", "rowwise"},
      {"model.layers.*.self_attn.q_proj", "colwise"},
      {"model.layers.*.self_attn.k_proj", "colwise"},
      {"model.layers.*.self_attn.v_proj", "colwise"},
      {"model.layers.*.self_attn.o_proj", "rowwise"},
      {"model.layers.*.mlp.gate_proj", "colwise"},
      {"model.layers.*.mlp.up_proj", "colwise"},
      {"model.layers.*.mlp.down_proj", "rowwise"},
  };
  // transformers' colwise_rep gathers the logits; colwise leaves each rank
  // its classes, for the vocab-parallel loss (forward() gathers them).
  if (!config.tie_word_embeddings) words.push_back({"lm_head", "colwise"});
  TensorParallelPlan plan = parse_tensor_parallel_plan(words);
  for (TensorParallelRule& rule : plan) rule.sequence_parallel = sequence_parallel;
  return plan;
}

void LlamaForCausalLMImpl::parallelize(const TensorParallel& tp) {
  if (tensor_parallel().enabled()) {
    throw Error("Llama: the model is split over tp_size " +
                std::to_string(tensor_parallel().size()) + " already");
  }
  require_divisible_by_group("Llama", config_.num_attention_heads, "num_attention_heads", tp.size(),
                             "tp_size");
  require_divisible_by_group("Llama", config_.kv_heads(), "num_key_value_heads", tp.size(),
                             "tp_size");
  require_divisible_by_group("Llama", config_.vocab_size,
                             "vocab_size (the logits are gathered whole)", tp.size(), "tp_size");
  if (model->sequence_parallel().enabled()) {
    require_divisible_by_group("Llama", config_.num_attention_heads / tp.size(),
                               "num_attention_heads / tp_size", model->sequence_parallel().size(),
                               "sp_size");
  }
  parallelize_module(*this, tensor_parallel_plan(config_, tp.sequence_parallel()), tp);
  model->set_tensor_parallel(tp);
}

CausalLMForward LlamaForCausalLMImpl::forward_function() {
  return [this](const at::Tensor& ids, const at::Tensor& positions) {
    return logits_part(ids, positions);
  };
}

TokenCrossEntropy LlamaForCausalLMImpl::cross_entropy_function() const {
  return vocab_parallel_token_cross_entropy(config_.vocab_size, tensor_parallel());
}

at::Tensor LlamaForCausalLMImpl::loss(const at::Tensor& input_ids, const at::Tensor& labels) {
  return sequence_parallel_causal_lm_loss(forward_function(), input_ids, labels,
                                          model->sequence_parallel(), cross_entropy_function());
}

at::Tensor LlamaForCausalLMImpl::loss_on_shifted_labels(const at::Tensor& input_ids,
                                                        const at::Tensor& shift_labels) {
  return sequence_parallel_shifted_causal_lm_loss(forward_function(), input_ids, shift_labels,
                                                  model->sequence_parallel(),
                                                  cross_entropy_function());
}

std::shared_ptr<LlamaForCausalLMImpl> LlamaForCausalLMImpl::from_pretrained(
    const std::string& folder, const LlamaLoadOptions& options) {
  const LlamaConfig config = read_llama_config(folder);
  return build_pretrained<LlamaForCausalLMImpl>(
      [&config] { return std::make_shared<LlamaForCausalLMImpl>(config); }, folder,
      options.dtype());
}

std::vector<std::string> LlamaForCausalLMImpl::save_pretrained(
    const std::string& folder, const ShardSize& max_shard_size) const {
  refuse_saving_split("Llama", tensor_parallel());
  auto files = save_pretrained_weights(*this, folder, max_shard_size);
  write_llama_config(config_, folder, saved_dtype_name(*this));
  return files;
}

}  // namespace accelerate::models
