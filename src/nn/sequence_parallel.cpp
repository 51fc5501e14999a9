#include "accelerate/nn/sequence_parallel.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <string>
#include <utility>

#include "accelerate/common/errors.h"
#include "nn/group_capsule.h"

namespace accelerate {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using detail::capsule_of;
using detail::group_in;

// Row r of `send` ([sp, ...], contiguous) to rank r of the group; the rows
// received, in rank order (any dtype: the Communicator moves the bytes).
at::Tensor all_to_all_rows(const at::Tensor& send, Communicator& group, const char* what) {
  at::Tensor receive = at::empty_like(send);
  group.all_to_all_async(send, receive, what).wait();
  return receive;
}

void require_attention_rank(const at::Tensor& x, const char* what) {
  if (x.dim() != 4) {
    throw Error(std::string(what) + " expects [batch, heads, tokens, head_dim], got " +
                std::to_string(x.dim()) + " dimensions");
  }
}

// [B, H, t, D] (t = T/sp, my tokens) -> [B, H/sp, T, D] (my heads).
at::Tensor tokens_to_heads(const at::Tensor& x, Communicator& group) {
  const int64_t sp = group.world_size();
  const int64_t b = x.size(0), h = x.size(1), t = x.size(2), d = x.size(3);
  // Row j: heads [j H/sp, (j+1) H/sp) of my tokens, for rank j.
  const at::Tensor send = x.reshape({b, sp, h / sp, t, d}).permute({1, 0, 2, 3, 4}).contiguous();
  // Row r: my heads of rank r's tokens; rank r holds the r-th stretch.
  const at::Tensor rows = all_to_all_rows(send, group, "sequence parallelism: tokens to heads");
  return rows.permute({1, 2, 0, 3, 4}).reshape({b, h / sp, sp * t, d});
}

// [B, h, T, D] (h = H/sp, my heads) -> [B, H, T/sp, D] (my tokens).
at::Tensor heads_to_tokens(const at::Tensor& x, Communicator& group) {
  const int64_t sp = group.world_size();
  const int64_t b = x.size(0), h = x.size(1), t = x.size(2) / sp, d = x.size(3);
  // Row j: the j-th stretch of tokens of my heads, for rank j.
  const at::Tensor send = x.reshape({b, h, sp, t, d}).permute({2, 0, 1, 3, 4}).contiguous();
  // Row r: rank r's heads of my tokens, in head order.
  const at::Tensor rows = all_to_all_rows(send, group, "sequence parallelism: heads to tokens");
  return rows.permute({1, 0, 2, 3, 4}).reshape({b, sp * h, t, d});
}

struct TokensToHeads : torch::autograd::Function<TokensToHeads> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, c10::IValue group) {
    ctx->saved_data["group"] = std::move(group);
    return tokens_to_heads(x, group_in(ctx));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {heads_to_tokens(grads[0], group_in(ctx)), at::Tensor()};
  }
};

struct HeadsToTokens : torch::autograd::Function<HeadsToTokens> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, c10::IValue group) {
    ctx->saved_data["group"] = std::move(group);
    return heads_to_tokens(x, group_in(ctx));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {tokens_to_heads(grads[0], group_in(ctx)), at::Tensor()};
  }
};

struct GroupSum : torch::autograd::Function<GroupSum> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, c10::IValue group) {
    ctx->saved_data["group"] = std::move(group);
    at::Tensor sum = x.clone();
    group_in(ctx).all_reduce(sum, ReduceOp::kSum);
    return sum;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor sum = grads[0].clone();
    group_in(ctx).all_reduce(sum, ReduceOp::kSum);
    return {sum, at::Tensor()};
  }
};

void require_split_divisible(int64_t count, const char* what, int sp, const char* where) {
  if (count % sp != 0) {
    throw Error(std::string(where) + ": " + std::to_string(count) + " " + what +
                " are not divisible by sp_size " + std::to_string(sp));
  }
}

}  // namespace

at::Tensor sequence_to_heads(const at::Tensor& x, const SequenceParallel& sp) {
  require_attention_rank(x, "sequence_to_heads");
  if (!sp.enabled()) return x;
  require_split_divisible(x.size(1), "heads", sp.size(), "sequence parallelism");
  return TokensToHeads::apply(x, capsule_of(sp.group()));
}

at::Tensor heads_to_sequence(const at::Tensor& x, const SequenceParallel& sp) {
  require_attention_rank(x, "heads_to_sequence");
  if (!sp.enabled()) return x;
  require_split_divisible(x.size(2), "tokens", sp.size(), "sequence parallelism");
  return HeadsToTokens::apply(x, capsule_of(sp.group()));
}

at::Tensor ulysses_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const SequenceParallel& sp, AttentionOptions options) {
  if (!sp.enabled()) return causal_attention(q, k, v, options);
  if (q.dim() != 4 || !q.sizes().equals(k.sizes()) || !q.sizes().equals(v.sizes())) {
    return causal_attention(q, k, v, options);  // its one-line shape error
  }
  // Checked before any collective, so every rank of the group (same shapes)
  // throws alike instead of leaving the others waiting.
  require_split_divisible(q.size(1), "heads", sp.size(), "ulysses_attention");
  const at::Tensor attended = causal_attention(sequence_to_heads(q, sp), sequence_to_heads(k, sp),
                                               sequence_to_heads(v, sp), options);
  return heads_to_sequence(attended, sp);
}

at::Tensor all_reduce_sum(const at::Tensor& x, const SequenceParallel& sp) {
  if (!sp.enabled()) return x;
  return GroupSum::apply(x, capsule_of(sp.group()));
}

at::Tensor sequence_parallel_loss(const at::Tensor& loss_sum, const at::Tensor& token_count,
                                  const SequenceParallel& sp) {
  if (loss_sum.numel() != 1 || token_count.numel() != 1) {
    throw Error("sequence_parallel_loss expects scalars, got loss_sum of " +
                std::to_string(loss_sum.numel()) + " and token_count of " +
                std::to_string(token_count.numel()) + " elements");
  }
  at::Tensor total = token_count.detach().to(at::kDouble).reshape({}).clone();
  if (sp.enabled()) sp.group()->all_reduce(total, ReduceOp::kSum);
  // No valid token in the whole group: every loss_sum is 0; divide by 1.
  const double tokens = std::max(total.item<double>(), 1.0);
  return all_reduce_sum(loss_sum.reshape({}) / tokens, sp);
}

at::Tensor slice_tokens(const at::Tensor& x, const SequenceParallel& sp) {
  if (x.dim() < 2) {
    throw Error("slice_tokens expects [batch, tokens, ...], got " + std::to_string(x.dim()) +
                " dimensions");
  }
  if (!sp.enabled()) return x;
  require_split_divisible(x.size(1), "tokens", sp.size(), "slice_tokens");
  const int64_t t = x.size(1) / sp.size();
  return x.narrow(1, sp.rank() * t, t);
}

SequenceSlice slice_sequence(const at::Tensor& input_ids, const SequenceParallel& sp,
                             const at::Tensor& labels, int64_t ignore_index) {
  if (input_ids.dim() != 2) {
    throw Error("slice_sequence expects input_ids [batch, tokens], got " +
                std::to_string(input_ids.dim()) + " dimensions");
  }
  const at::Tensor unshifted = labels.defined() ? labels : input_ids;
  if (!unshifted.sizes().equals(input_ids.sizes())) {
    throw Error("slice_sequence: labels must have input_ids' shape [batch, tokens]");
  }
  require_split_divisible(input_ids.size(1), "tokens", sp.size(), "slice_sequence");
  // Shift before splitting: the last token of a slice predicts the first of
  // the next rank's slice, which only the whole sequence knows.
  const at::Tensor shifted =
      at::cat({unshifted.narrow(1, 1, unshifted.size(1) - 1),
               at::full({unshifted.size(0), 1}, ignore_index, unshifted.options())},
              1);
  SequenceSlice slice;
  const int64_t t = input_ids.size(1) / sp.size();
  slice.offset = sp.rank() * t;
  slice.input_ids = input_ids.narrow(1, slice.offset, t);
  slice.labels = shifted.narrow(1, slice.offset, t);
  slice.position_ids =
      at::arange(slice.offset, slice.offset + t, input_ids.options().dtype(at::kLong));
  return slice;
}

}  // namespace accelerate
