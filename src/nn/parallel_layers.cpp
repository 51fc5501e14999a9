#include "accelerate/nn/parallel_layers.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "accelerate/common/errors.h"
#include "accelerate/detail/enum_names.h"
#include "nn/split_linear.h"

namespace accelerate {
namespace {

constexpr detail::EnumName<TensorParallelStyle> kTensorParallelStyleNames[] = {
    {TensorParallelStyle::kReplicate, "replicate"},
    {TensorParallelStyle::kColwise, "colwise"},
    {TensorParallelStyle::kColwiseRep, "colwise_rep"},
    {TensorParallelStyle::kRowwise, "rowwise"},
};
static_assert(detail::names_are_distinct(kTensorParallelStyleNames));

bool splits(TensorParallelStyle style, const TensorParallel& tp) {
  return tp.enabled() && style != TensorParallelStyle::kReplicate;
}

using detail::require_splittable;
using detail::split_layer_name;

// `tensor` becomes a tensor of its own holding rows [range) of `dim` (the
// same parameter object, so optimizers built before keep it; the whole's
// memory is freed).
void keep_part(at::Tensor& tensor, int64_t dim, TensorParallelRange range) {
  if (!tensor.defined()) return;
  at::NoGradGuard no_grad;
  tensor.set_data(
      tensor.narrow(dim, range.start, range.length).clone(at::MemoryFormat::Contiguous));
}

}  // namespace

const char* to_string(TensorParallelStyle style) {
  return detail::enum_name(kTensorParallelStyleNames, style, "?");
}

std::optional<TensorParallelStyle> parse_tensor_parallel_style(const std::string& text) {
  return detail::parse_enum(kTensorParallelStyleNames, text, detail::NameCase::kExact);
}

// ---- ParallelLinear -----------------------------------------------------

ParallelLinearImpl::ParallelLinearImpl(const torch::nn::LinearOptions& options)
    : options_(options) {
  reset();
}

void ParallelLinearImpl::reset() {
  weight =
      register_parameter("weight", torch::empty({options_.out_features(), options_.in_features()}));
  bias = options_.bias() ? register_parameter("bias", torch::empty({options_.out_features()}))
                         : register_parameter("bias", {}, /*requires_grad=*/false);
  reset_parameters();
}

void ParallelLinearImpl::reset_parameters() {
  // torch::nn::Linear's draws on the whole layer, then this rank's part of
  // them, so every rank with the same generator state holds parts of one
  // whole layer (and a layer never split draws as torch::nn::Linear).
  at::NoGradGuard no_grad;
  if (weight_split_dim()) {
    weight.set_data(at::empty({options_.out_features(), options_.in_features()}, weight.options()));
    if (bias.defined()) bias.set_data(at::empty({options_.out_features()}, bias.options()));
  }
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5));
  if (bias.defined()) {
    const double bound = 1 / std::sqrt(static_cast<double>(options_.in_features()));
    torch::nn::init::uniform_(bias, -bound, bound);
  }
  keep_own_part();
}

void ParallelLinearImpl::keep_own_part() {
  const std::optional<int64_t> dim = weight_split_dim();
  if (!dim) return;
  const TensorParallelRange range =
      tensor_parallel_range(*dim == 0 ? options_.out_features() : options_.in_features(), tp_);
  keep_part(weight, *dim, range);
  if (*dim == 0) keep_part(bias, 0, range);
}

std::optional<int64_t> ParallelLinearImpl::weight_split_dim() const {
  if (!splits(style_, tp_)) return std::nullopt;
  return style_ == TensorParallelStyle::kRowwise ? 1 : 0;
}

void ParallelLinearImpl::parallelize(TensorParallelStyle style, const TensorParallel& tp,
                                     bool sequence_parallel) {
  detail::check_linear_split(split(), {"ParallelLinear", style, tp, sequence_parallel,
                                       options_.in_features(), options_.out_features()});
  style_ = style;
  sequence_parallel_ = sequence_parallel;
  tp_ = tp;
  keep_own_part();
}

detail::LinearSplit ParallelLinearImpl::split() const {
  return {"ParallelLinear",       style_, tp_, sequence_parallel_, options_.in_features(),
          options_.out_features()};
}

std::vector<TensorParallelPart> ParallelLinearImpl::split_parts() const {
  const std::optional<int64_t> dim = weight_split_dim();
  if (!dim) return {};
  std::vector<TensorParallelPart> parts{
      {weight, *dim, *dim == 0 ? options_.out_features() : options_.in_features(), tp_}};
  if (*dim == 0 && bias.defined()) parts.push_back({bias, 0, options_.out_features(), tp_});
  return parts;
}

at::Tensor ParallelLinearImpl::forward(const at::Tensor& x) {
  if (!splits(style_, tp_)) return at::linear(x, weight, bias);
  return detail::split_linear_forward(x, weight, bias, split());
}

at::Tensor colwise_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                          const TensorParallel& tp) {
  if (tp.sequence_parallel())
    return detail::sequence_parallel_colwise_products(x, {weight}, {bias}, tp)[0];
  return at::linear(copy_to_tensor_parallel(x, tp), weight, bias);
}

std::vector<at::Tensor> forward_sharing_input(const at::Tensor& x,
                                              const std::vector<ParallelLinear>& layers) {
  const auto split_of = [](const ParallelLinear& layer) {
    return detail::LinearSplit{"ParallelLinear",
                               layer->style(),
                               layer->tensor_parallel(),
                               layer->sequence_parallel(),
                               layer->options().in_features(),
                               layer->options().out_features()};
  };
  const auto alike = [&](const ParallelLinear& layer) {
    const detail::LinearSplit split = split_of(layer), first = split_of(layers.front());
    return split.splits() && split.style == TensorParallelStyle::kColwise &&
           split.tp.group() == first.tp.group() &&
           split.sequence_parallel == first.sequence_parallel;
  };
  std::vector<at::Tensor> results;
  if (layers.empty() || !std::all_of(layers.begin(), layers.end(), alike)) {
    for (const ParallelLinear& layer : layers) results.push_back(layer.ptr()->forward(x));
    return results;
  }
  // Checked before the one collective, alike on every rank.
  for (const ParallelLinear& layer : layers) detail::require_input_width(x, split_of(layer));
  const TensorParallel& tp = layers.front()->tensor_parallel();
  if (layers.front()->sequence_parallel()) {
    std::vector<at::Tensor> weights, biases;
    for (const ParallelLinear& layer : layers) {
      weights.push_back(layer->weight);
      biases.push_back(layer->bias);
    }
    return detail::sequence_parallel_colwise_products(x, weights, biases, tp);
  }
  const at::Tensor input = copy_to_tensor_parallel(x, tp);
  for (const ParallelLinear& layer : layers)
    results.push_back(at::linear(input, layer->weight, layer->bias));
  return results;
}

// ---- ParallelEmbedding --------------------------------------------------

ParallelEmbeddingImpl::ParallelEmbeddingImpl(const torch::nn::EmbeddingOptions& options)
    : options_(options) {
  const char* unsupported = options.max_norm()             ? "max_norm"
                            : options.scale_grad_by_freq() ? "scale_grad_by_freq"
                            : options.sparse()             ? "sparse"
                            : options._weight().defined()  ? "_weight"
                                                           : nullptr;
  if (unsupported != nullptr) {
    throw ConfigError(std::string("ParallelEmbedding takes num_embeddings, embedding_dim and "
                                  "padding_idx; ") +
                      unsupported + " is set");
  }
  if (options_.padding_idx() && *options_.padding_idx() < 0) {
    options_.padding_idx(*options_.padding_idx() + options_.num_embeddings());
  }
  if (options_.padding_idx() &&
      (*options_.padding_idx() < 0 || *options_.padding_idx() >= options_.num_embeddings())) {
    throw ConfigError("ParallelEmbedding: padding_idx is outside the " +
                      std::to_string(options_.num_embeddings()) + " embeddings");
  }
  reset();
}

void ParallelEmbeddingImpl::reset() {
  weight = register_parameter("weight",
                              torch::empty({options_.num_embeddings(), options_.embedding_dim()}));
  reset_parameters();
}

void ParallelEmbeddingImpl::reset_parameters() {
  at::NoGradGuard no_grad;
  const bool split = splits(style_, tp_);
  if (split) {
    weight.set_data(
        at::empty({options_.num_embeddings(), options_.embedding_dim()}, weight.options()));
  }
  torch::nn::init::normal_(weight);
  if (options_.padding_idx()) weight[*options_.padding_idx()].fill_(0);
  if (split) keep_part(weight, 0, vocabulary_range());
}

TensorParallelRange ParallelEmbeddingImpl::vocabulary_range() const {
  if (!splits(style_, tp_)) return {0, options_.num_embeddings()};
  return tensor_parallel_range(options_.num_embeddings(), tp_);
}

void ParallelEmbeddingImpl::parallelize(TensorParallelStyle style, const TensorParallel& tp,
                                        bool sequence_parallel) {
  if (splits(style_, tp_)) {
    throw ConfigError(split_layer_name("ParallelEmbedding", style_, tp_) +
                      ": already split; a layer is split once");
  }
  if (style != TensorParallelStyle::kReplicate && style != TensorParallelStyle::kRowwise) {
    throw ConfigError(std::string("ParallelEmbedding: an embedding splits by vocabulary "
                                  "(rowwise) or not at all (replicate), not ") +
                      to_string(style));
  }
  if (splits(style, tp)) {
    require_splittable(options_.num_embeddings(), "embeddings",
                       split_layer_name("ParallelEmbedding", style, tp), tp);
  }
  style_ = style;
  sequence_parallel_ = sequence_parallel;
  tp_ = tp;
  if (splits(style_, tp_)) keep_part(weight, 0, vocabulary_range());
}

std::vector<TensorParallelPart> ParallelEmbeddingImpl::split_parts() const {
  if (!splits(style_, tp_)) return {};
  return {{weight, 0, options_.num_embeddings(), tp_}};
}

at::Tensor ParallelEmbeddingImpl::forward(const at::Tensor& input_ids) {
  const int64_t padding = options_.padding_idx().value_or(-1);
  if (!splits(style_, tp_)) return at::embedding(weight, input_ids, padding);
  // Other ranks' rows would give zeros silently: one pass and one sync,
  // the offending id looked for only when there is one.
  const at::Tensor outside = (input_ids < 0) | (input_ids >= options_.num_embeddings());
  if (outside.any().item<bool>()) {
    throw Error(split_layer_name("ParallelEmbedding", style_, tp_) + ": id " +
                std::to_string(input_ids.masked_select(outside)[0].item<int64_t>()) +
                " is outside the " + std::to_string(options_.num_embeddings()) + " embeddings");
  }
  // Ids of other ranks' rows look up row 0 and are zeroed (their gradient
  // too); the group's sum then holds every id's row exactly once.
  const TensorParallelRange rows = vocabulary_range();
  const at::Tensor mine = (input_ids >= rows.start) & (input_ids < rows.end());
  const at::Tensor local = (input_ids - rows.start).masked_fill(mine.logical_not(), 0);
  const int64_t local_padding =
      padding >= rows.start && padding < rows.end() ? padding - rows.start : -1;
  const at::Tensor part =
      at::embedding(weight, local, local_padding).masked_fill(mine.logical_not().unsqueeze(-1), 0);
  return sequence_parallel_ ? reduce_scatter_tokens(part, tp_)
                            : reduce_from_tensor_parallel(part, tp_);
}

}  // namespace accelerate
