// Sequence parallelism (DeepSpeed Ulysses): the sp_size consecutive ranks of
// a sequence-parallel group share one batch and each holds T/sp of its
// tokens through the model. Around attention an all-to-all turns "my
// tokens, all heads" into "all tokens, my heads" and back, so attention
// stays exact while activations per rank shrink by about sp.
//
//   // ParallelismConfig().sp_size(2), or accelerate launch
//   // --parallelism_config_sp_size 2 (docs/sequence-parallel.md)
//   const accelerate::SequenceParallel& sp = accelerator.sequence_parallel();
//   auto slice = accelerate::slice_sequence(tokens, sp);     // [B, T/sp] + labels
//   ... q, k, v: [B, H, T/sp, D]
//   auto y = accelerate::ulysses_attention(q, k, v, sp);     // [B, H, T/sp, D]
//   auto [sum, count] = ...                                  // this slice's token losses
//   auto loss = accelerate::sequence_parallel_loss(sum, count, sp);
//
// Data and ZeRO parallelism keep running over every process: every rank of
// a group holds the same parameters, and the engines average gradients over
// all dp x sp ranks, which with sequence_parallel_loss gives exactly the
// data-parallel average of each group's token mean.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include <ATen/core/Tensor.h>

#include "accelerate/detail/parallel_group.h"
#include "accelerate/distributed/communicator.h"
#include "accelerate/nn/attention.h"

namespace accelerate {

// This process's sequence-parallel group. Default: a group of one (nothing
// is split; every function below is then the plain computation).
class SequenceParallel : public detail::ParallelGroup {
 public:
  SequenceParallel() = default;
  // `group`: the communicator of this process's group (null: one process).
  explicit SequenceParallel(std::shared_ptr<Communicator> group)
      : ParallelGroup(std::move(group)) {}
};

// The all-to-alls around attention, differentiable (the backward of each is
// the other, on the upstream gradient). Collective in the group: every rank
// calls them in the same order (activation checkpointing's recomputation
// does, as every rank runs the same model). Error naming both numbers when
// the heads (resp. tokens) are not divisible by the group's size.
// [B, H, T/sp, D] (my tokens, all heads) -> [B, H/sp, T, D] (all tokens, my heads)
at::Tensor sequence_to_heads(const at::Tensor& x, const SequenceParallel& sp);
// [B, H/sp, T, D] -> [B, H, T/sp, D]
at::Tensor heads_to_sequence(const at::Tensor& x, const SequenceParallel& sp);

// Causal attention over the group's whole sequence for q, k, v holding this
// rank's T/sp consecutive tokens (rank r: tokens [r T/sp, (r+1) T/sp)) of
// every head; returns this rank's tokens of the result. Equal to
// causal_attention on the unsplit tensors up to rounding. Dropout, if any,
// draws on each rank's generator for its heads, so it differs from the
// unsplit run's draws.
at::Tensor ulysses_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const SequenceParallel& sp, AttentionOptions options = {});

// Sum over the group, differentiable: forward, every rank gets the sum of
// every rank's `x`; backward, every rank's gradient is the sum of every
// rank's upstream gradient (torch.distributed.nn.all_reduce). Identity for
// a group of one.
at::Tensor all_reduce_sum(const at::Tensor& x, const SequenceParallel& sp);

// The group's token-mean loss, the same on every rank of the group:
// sum over ranks of loss_sum / (the group's valid tokens), where loss_sum
// (a scalar, differentiable) is the sum of this rank's valid tokens' losses
// and token_count their number (any integer or floating scalar; not
// differentiated). Exact whatever the tokens' spread over the slices (a
// rank with none contributes 0); a group with no valid token gives 0, never
// NaN. With gradients averaged over all dp x sp ranks, training equals the
// unsplit run's token mean.
at::Tensor sequence_parallel_loss(const at::Tensor& loss_sum, const at::Tensor& token_count,
                                  const SequenceParallel& sp);

// This rank's part of a batch of sequences.
struct SequenceSlice {
  at::Tensor input_ids;     // [B, T/sp]: tokens [offset, offset + T/sp)
  at::Tensor labels;        // [B, T/sp]: each token's next token, ignore_index past the end
  at::Tensor position_ids;  // [T/sp] int64: offset, offset + 1, ...
  int64_t offset = 0;       // rank() * T/sp
};

// Splits `input_ids` [B, T] (and `labels` [B, T], unshifted, ignore_index
// where no loss is wanted; undefined: input_ids) for this rank: the labels
// are shifted by one BEFORE the split, so the last token of a slice keeps
// its next token (the first of the next rank's slice). Error naming both
// numbers when T is not divisible by the group's size.
SequenceSlice slice_sequence(const at::Tensor& input_ids, const SequenceParallel& sp,
                             const at::Tensor& labels = {}, int64_t ignore_index = -100);

// This rank's T/sp columns of tensors already aligned (inputs and their
// shifted targets, as a windowed dataset yields them): [B, T, ...] -> [B, T/sp, ...].
at::Tensor slice_tokens(const at::Tensor& x, const SequenceParallel& sp);

}  // namespace accelerate
