#include "accelerate/nn/tensor_parallel.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "accelerate/common/errors.h"
#include "nn/dropout_mask.h"
#include "nn/group_capsule.h"
#include "nn/split_linear.h"

namespace accelerate {
namespace {

using detail::capsule_of;
using detail::group_in;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t wrapped_dim(const at::Tensor& x, int64_t dim, const char* where) {
  const int64_t rank = x.dim();
  if (dim < -rank || dim >= rank) {
    throw Error(std::string(where) + ": dimension " + std::to_string(dim) +
                " is out of range for a tensor of " + std::to_string(rank) + " dimensions");
  }
  return dim < 0 ? dim + rank : dim;
}

// Checked before any message, so every rank (same shapes) refuses alike
// instead of leaving the others waiting.
void require_divisible(const at::Tensor& x, int64_t dim, int tp, const char* what,
                       const char* where) {
  if (x.size(dim) % tp != 0) {
    throw Error(std::string(where) + ": " + std::to_string(x.size(dim)) + " " + what +
                " are not divisible by tp_size " + std::to_string(tp));
  }
}

// Every rank's `x` (equal shapes) concatenated along `dim` in rank order.
at::Tensor gather_along(const at::Tensor& x, int64_t dim, Communicator& group) {
  const at::Tensor part = x.contiguous();
  at::Tensor rows = at::empty({group.world_size() * part.numel()}, part.options());
  group.all_gather_into(part, rows);
  std::vector<int64_t> stacked{group.world_size()};
  stacked.insert(stacked.end(), part.sizes().begin(), part.sizes().end());
  return at::cat(rows.view(stacked).unbind(0), dim);
}

// This rank's 1/tp of `x` along `dim`, a tensor of its own.
at::Tensor part_along(const at::Tensor& x, int64_t dim, Communicator& group) {
  const int64_t length = x.size(dim) / group.world_size();
  return x.narrow(dim, group.rank() * length, length).clone(at::MemoryFormat::Contiguous);
}

// This rank's 1/tp along `dim` of the sum of every rank's `x`, summed in rank
// order by the Communicator's reduce-scatter (half an all-reduce's bytes).
at::Tensor reduce_scatter_along(const at::Tensor& x, int64_t dim, Communicator& group) {
  const int64_t tp = group.world_size();
  std::vector<int64_t> split(x.sizes().begin(), x.sizes().end());
  split[dim] /= tp;
  split.insert(split.begin() + dim, tp);
  // Row r of the buffer: the r-th stretch along `dim`, for rank r.
  const at::Tensor rows = x.reshape(split).movedim(dim, 0);
  at::Tensor buffer = group.reduce_scatter_buffer(x.numel(), x.options());
  buffer.view(rows.sizes()).copy_(rows);
  split.erase(split.begin() + dim);
  at::Tensor part = at::empty(split, x.options());
  group.reduce_scatter_sum(buffer, part);
  return part;
}

at::Tensor summed(const at::Tensor& x, Communicator& group) {
  at::Tensor sum = x.clone(at::MemoryFormat::Contiguous);
  group.all_reduce(sum, ReduceOp::kSum);
  return sum;
}

struct CopyToGroup : torch::autograd::Function<CopyToGroup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, c10::IValue group) {
    ctx->saved_data["group"] = std::move(group);
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {summed(grads[0], group_in(ctx)), at::Tensor()};
  }
};

struct ReduceFromGroup : torch::autograd::Function<ReduceFromGroup> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& x, c10::IValue group) {
    return summed(x, detail::group_of(group));
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

// An operation along one dimension in the group, and its conjugate as
// backward: the four pairs below differ only in which two they are.
using AlongDimension = at::Tensor (*)(const at::Tensor&, int64_t, Communicator&);

template <AlongDimension Forward, AlongDimension Backward>
struct AlongDimensionPair : torch::autograd::Function<AlongDimensionPair<Forward, Backward>> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, c10::IValue group,
                            int64_t dim) {
    ctx->saved_data["group"] = std::move(group);
    ctx->saved_data["dim"] = dim;
    return Forward(x, dim, group_in(ctx));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {Backward(grads[0], ctx->saved_data["dim"].toInt(), group_in(ctx)), at::Tensor(),
            at::Tensor()};
  }
};

// Forward gather, backward this rank's part (the consumer is replicated).
using GatherFromGroup = AlongDimensionPair<gather_along, part_along>;
// Forward this rank's part, backward the parts gathered.
using ScatterToGroup = AlongDimensionPair<part_along, gather_along>;
// Forward gather, backward reduce-scatter (every rank's consumer read the
// whole and holds a partial gradient of it).
using GatherReducingBack = AlongDimensionPair<gather_along, reduce_scatter_along>;
// Forward reduce-scatter, backward gather.
using ReduceScatterToGroup = AlongDimensionPair<reduce_scatter_along, gather_along>;

constexpr int64_t kTokenDim = 1;  // of [batch, tokens, ...]

void require_token_rank(const at::Tensor& x, const char* where) {
  if (x.dim() < 2) {
    throw Error(std::string(where) + " expects [batch, tokens, ...], got " +
                std::to_string(x.dim()) + " dimensions");
  }
}

}  // namespace

TensorParallelRange tensor_parallel_range(int64_t total, int size, int rank) {
  if (total < 0 || size < 1 || rank < 0 || rank >= size) {
    throw Error("tensor_parallel_range: rank " + std::to_string(rank) + " of " +
                std::to_string(size) + " processes cannot hold a part of " + std::to_string(total) +
                " rows");
  }
  const int64_t base = total / size, longer = total % size;
  return {rank * base + std::min<int64_t>(rank, longer), base + (rank < longer ? 1 : 0)};
}

TensorParallelRange tensor_parallel_range(int64_t total, const TensorParallel& tp) {
  return tensor_parallel_range(total, tp.size(), tp.rank());
}

at::Tensor copy_to_tensor_parallel(const at::Tensor& x, const TensorParallel& tp) {
  if (!tp.enabled()) return x;
  return CopyToGroup::apply(x, capsule_of(tp.group()));
}

at::Tensor reduce_from_tensor_parallel(const at::Tensor& x, const TensorParallel& tp) {
  if (!tp.enabled()) return x;
  return ReduceFromGroup::apply(x, capsule_of(tp.group()));
}

at::Tensor gather_from_tensor_parallel(const at::Tensor& x, const TensorParallel& tp, int64_t dim) {
  dim = wrapped_dim(x, dim, "gather_from_tensor_parallel");
  if (!tp.enabled()) return x;
  return GatherFromGroup::apply(x, capsule_of(tp.group()), dim);
}

namespace {

// The length of each of `layout`'s blocks. Checked alike on every rank.
int64_t block_length(const TensorParallelPart& layout, const char* where) {
  if (layout.blocks < 1 || layout.whole_length % layout.blocks != 0) {
    throw Error(std::string(where) + ": a whole of " + std::to_string(layout.whole_length) +
                " does not split into " + std::to_string(layout.blocks) + " equal blocks");
  }
  return layout.whole_length / layout.blocks;
}

// One block's whole from every rank's part of it (uneven parts too): every
// part padded to the longest, gathered, and cut back to its range.
at::Tensor gather_block(const at::Tensor& part, int64_t dim, int64_t length,
                        const TensorParallel& tp) {
  const int64_t longest = tensor_parallel_range(length, tp.size(), 0).length;
  std::vector<int64_t> padded_shape(part.sizes().begin(), part.sizes().end());
  padded_shape[dim] = longest;
  at::Tensor padded = at::zeros(padded_shape, part.options());
  padded.narrow(dim, 0, part.size(dim)).copy_(part);
  const at::Tensor gathered = gather_along(padded, dim, *tp.group());
  std::vector<at::Tensor> parts;
  for (int rank = 0; rank < tp.size(); ++rank) {
    const TensorParallelRange range = tensor_parallel_range(length, tp.size(), rank);
    parts.push_back(gathered.narrow(dim, rank * longest, range.length));
  }
  return at::cat(parts, dim);
}

// Colwise products of one input whose tokens are split over the group
// (Megatron's sequence parallelism) as one autograd node that keeps only this
// rank's tokens for backward, not the gathered input: backward gathers them
// again for the weights' gradients (Megatron's trade, so that the input is
// held at 1/tp), and reduce-scatters the input's gradient summed over the
// products, once for all of them. In the products' dtype (autocast's, when
// it cast them), each gradient returned in its tensor's dtype. `biases`
// holds the defined biases only (an input of a Function must be a tensor),
// `has_bias` which products have one.
struct GatheredColwiseProducts : torch::autograd::Function<GatheredColwiseProducts> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList weights,
                               at::TensorList biases, c10::List<bool> has_bias, c10::IValue group) {
    ctx->saved_data["group"] = std::move(group);
    const at::Tensor whole = gather_along(x, kTokenDim, group_in(ctx));
    variable_list products;
    variable_list saved{x};
    size_t next_bias = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
      products.push_back(has_bias.get(i) ? at::linear(whole, weights[i], biases[next_bias++])
                                         : at::linear(whole, weights[i]));
      saved.push_back(weights[i]);
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["has_bias"] = std::move(has_bias);
    return products;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const c10::List<bool> has_bias = ctx->saved_data["has_bias"].toBoolList();
    const size_t count = saved.size() - 1;
    const at::Tensor whole = gather_along(x, kTokenDim, group_in(ctx));
    at::Tensor input_grad = at::zeros(whole.sizes(), x.options());
    variable_list weight_grads(count), bias_grads;
    for (size_t i = 0; i < count; ++i) {
      const at::Tensor& grad = grads[i];
      const at::Tensor& weight = saved[i + 1];
      if (!grad.defined()) {  // a product nothing read
        if (has_bias.get(i)) bias_grads.emplace_back();
        continue;
      }
      const at::Tensor rows = grad.reshape({-1, grad.size(-1)});
      input_grad.add_(at::matmul(grad, weight.to(grad.scalar_type())).to(x.scalar_type()));
      weight_grads[i] = rows.t()
                            .mm(whole.reshape({-1, whole.size(-1)}).to(grad.scalar_type()))
                            .to(weight.scalar_type());
      if (has_bias.get(i)) bias_grads.push_back(rows.sum(0).to(weight.scalar_type()));
    }
    variable_list result{reduce_scatter_along(input_grad, kTokenDim, group_in(ctx))};
    result.insert(result.end(), weight_grads.begin(), weight_grads.end());
    result.insert(result.end(), bias_grads.begin(), bias_grads.end());
    result.emplace_back();  // has_bias
    result.emplace_back();  // the group
    return result;
  }
};

}  // namespace

at::Tensor gather_whole(const at::Tensor& part, const TensorParallelPart& layout) {
  const int64_t dim = wrapped_dim(part, layout.dim, "gather_whole");
  const int64_t length = block_length(layout, "gather_whole");
  if (!layout.tp.enabled()) return part;
  at::NoGradGuard no_grad;
  const int64_t mine = tensor_parallel_range(length, layout.tp).length;
  std::vector<at::Tensor> blocks;
  for (int64_t b = 0; b < layout.blocks; ++b) {
    blocks.push_back(gather_block(part.narrow(dim, b * mine, mine), dim, length, layout.tp));
  }
  return blocks.size() == 1 ? blocks[0] : at::cat(blocks, dim);
}

at::Tensor part_of_whole(const at::Tensor& whole, const TensorParallelPart& layout) {
  const int64_t dim = wrapped_dim(whole, layout.dim, "part_of_whole");
  const int64_t length = block_length(layout, "part_of_whole");
  if (whole.size(dim) != layout.whole_length) {
    throw Error("part_of_whole: the whole has " + std::to_string(whole.size(dim)) +
                " along dimension " + std::to_string(dim) + ", not " +
                std::to_string(layout.whole_length));
  }
  at::NoGradGuard no_grad;
  const TensorParallelRange range = tensor_parallel_range(length, layout.tp);
  std::vector<at::Tensor> blocks;
  for (int64_t b = 0; b < layout.blocks; ++b) {
    blocks.push_back(whole.narrow(dim, b * length + range.start, range.length));
  }
  return at::cat(blocks, dim).contiguous();
}

at::Tensor scatter_to_tensor_parallel(const at::Tensor& x, const TensorParallel& tp, int64_t dim) {
  dim = wrapped_dim(x, dim, "scatter_to_tensor_parallel");
  if (!tp.enabled()) return x;
  require_divisible(x, dim, tp.size(), "elements", "scatter_to_tensor_parallel");
  return ScatterToGroup::apply(x, capsule_of(tp.group()), dim);
}

at::Tensor gather_tokens(const at::Tensor& x, const TensorParallel& tp) {
  require_token_rank(x, "gather_tokens");
  if (!tp.enabled()) return x;
  return GatherReducingBack::apply(x, capsule_of(tp.group()), kTokenDim);
}

at::Tensor reduce_scatter_tokens(const at::Tensor& x, const TensorParallel& tp) {
  require_token_rank(x, "reduce_scatter_tokens");
  if (!tp.enabled()) return x;
  require_divisible(x, kTokenDim, tp.size(), "tokens", "reduce_scatter_tokens");
  return ReduceScatterToGroup::apply(x, capsule_of(tp.group()), kTokenDim);
}

at::Tensor scatter_tokens(const at::Tensor& x, const TensorParallel& tp) {
  require_token_rank(x, "scatter_tokens");
  if (!tp.enabled()) return x;
  require_divisible(x, kTokenDim, tp.size(), "tokens", "scatter_tokens");
  return ScatterToGroup::apply(x, capsule_of(tp.group()), kTokenDim);
}

namespace {

// splitmix64's finaliser over the draw and the rank: ranks' seeds that are
// neighbours in any sense give unrelated streams, whatever the generator.
uint64_t rank_seed(uint64_t draw, int rank) {
  uint64_t z = draw + 0x9E3779B97F4A7C15ULL * (static_cast<uint64_t>(rank) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

std::optional<at::Generator> split_dropout_generator(const TensorParallel& tp,
                                                     const at::Tensor& like) {
  if (!tp.enabled()) return std::nullopt;
  // One number of the default CPU generator: alike on every rank, and
  // restored with it by activation checkpointing and load_state.
  const auto draw = static_cast<uint64_t>(
      at::randint(std::numeric_limits<int64_t>::max(), {1}, at::kLong).item<int64_t>());
  at::Generator device_default = at::globalContext().defaultGenerator(like.device());
  at::Generator generator;
  {
    std::lock_guard<std::mutex> lock(device_default.mutex());
    generator = device_default.clone();  // the device's kind, with a state of its own
  }
  generator.set_current_seed(rank_seed(draw, tp.rank()));
  return generator;
}

at::Tensor split_dropout(const at::Tensor& x, double p, bool train, const TensorParallel& tp) {
  if (!tp.enabled() || !train || p == 0) return at::dropout(x, p, train);
  if (p < 0 || p >= 1) {
    throw Error("split_dropout: p must be in [0, 1), got " + std::to_string(p));
  }
  return detail::dropout_from(x, p, *split_dropout_generator(tp, x));
}

at::Tensor dropout_between_layers(const at::Tensor& x, double p, bool train,
                                  const TensorParallel& tp) {
  return tp.sequence_parallel() ? split_dropout(x, p, train, tp) : at::dropout(x, p, train);
}

namespace detail {

std::vector<at::Tensor> sequence_parallel_colwise_products(const at::Tensor& x,
                                                           const std::vector<at::Tensor>& weights,
                                                           const std::vector<at::Tensor>& biases,
                                                           const TensorParallel& tp) {
  require_token_rank(x, "sequence parallelism");
  if (!tp.enabled()) {
    std::vector<at::Tensor> products;
    for (size_t i = 0; i < weights.size(); ++i)
      products.push_back(at::linear(x, weights[i], biases[i]));
    return products;
  }
  std::vector<at::Tensor> defined_biases;
  c10::List<bool> has_bias;
  for (const at::Tensor& bias : biases) {
    has_bias.push_back(bias.defined());
    if (bias.defined()) defined_biases.push_back(bias);
  }
  return GatheredColwiseProducts::apply(x, at::TensorList(weights), at::TensorList(defined_biases),
                                        has_bias, capsule_of(tp.group()));
}

}  // namespace detail
}  // namespace accelerate
