// Tensor parallelism (Megatron-LM): the tp consecutive ranks of a
// tensor-parallel group hold different parts of the same layers' weights and
// compute one batch together. A column-parallel Linear holds 1/tp of the
// output features, a row-parallel one 1/tp of the input features, so a
// column-then-row pair (attention's q/k/v then o_proj, an MLP's up then down)
// needs one all-reduce of the activations forward and one backward, and each
// rank's parameters, gradients and optimizer state of the pair are 1/tp of
// the whole. The layers are in parallel_layers.h; this header has the group
// and the differentiable collectives they are made of, for models that split
// other computations the same way.
//
//   accelerate::TensorParallel tp(group);               // this rank's tp group
//   auto x_all = accelerate::copy_to_tensor_parallel(x, tp);        // f
//   auto h = at::linear(x_all, w_column_part);                      // my features
//   auto y = accelerate::reduce_from_tensor_parallel(at::linear(h, w_row_part), tp);  // g
//
// Every function is collective in the group: its ranks call them in the same
// order with tensors of the same shape (a model's forward does, as every rank
// runs the same layers; activation checkpointing's recomputation too). A
// shape that cannot be split is refused before any message, alike on every
// rank, never a hang.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include "accelerate/detail/parallel_group.h"
#include "accelerate/distributed/communicator.h"

namespace accelerate {

// This process's tensor-parallel group. Default: a group of one (nothing is
// split; every function below is then the identity or the plain computation).
// `sequence_parallel`: Megatron's sequence parallelism (below) between the
// split layers of the models that read it (their plans split the norms'
// activations along tokens); meaningless in a group of one, where
// sequence_parallel() is false.
class TensorParallel : public detail::ParallelGroup {
 public:
  TensorParallel() = default;
  // `group`: the communicator of this process's group (null: one process).
  explicit TensorParallel(std::shared_ptr<Communicator> group, bool sequence_parallel = false)
      : ParallelGroup(std::move(group)), sequence_parallel_(sequence_parallel) {}
  bool sequence_parallel() const { return sequence_parallel_ && enabled(); }

 private:
  bool sequence_parallel_ = false;
};

// The part [start, start + length) of `total` rows (features, vocabulary
// entries) that rank `rank` of `size` holds: consecutive ranges in rank
// order, their lengths differing by at most one (the first total % size
// ranks hold one more), so a vocabulary that tp does not divide splits
// without padding rows.
struct TensorParallelRange {
  int64_t start = 0;
  int64_t length = 0;
  int64_t end() const { return start + length; }
};
TensorParallelRange tensor_parallel_range(int64_t total, int size, int rank);
TensorParallelRange tensor_parallel_range(int64_t total, const TensorParallel& tp);

// Megatron's conjugate pair around a split computation.
// f: forward the identity; backward the sum of every rank's gradient (each
// rank's part of the computation contributed its own).
at::Tensor copy_to_tensor_parallel(const at::Tensor& x, const TensorParallel& tp);
// g: forward the sum of every rank's `x` (the partial results of a
// row-parallel product); backward the identity.
at::Tensor reduce_from_tensor_parallel(const at::Tensor& x, const TensorParallel& tp);

// Whole from parts along `dim`: forward every rank's `x` concatenated in rank
// order (equal sizes); backward this rank's part of the gradient. For a split
// result a replicated computation reads next (a column-parallel Linear's
// gathered output).
at::Tensor gather_from_tensor_parallel(const at::Tensor& x, const TensorParallel& tp,
                                       int64_t dim = -1);
// Parts from whole: forward this rank's 1/tp of `x` along `dim` (divisible);
// backward every rank's gradient part gathered.
at::Tensor scatter_to_tensor_parallel(const at::Tensor& x, const TensorParallel& tp,
                                      int64_t dim = -1);

// Where this rank's part of a split tensor lies in its whole: along `dim`,
// the whole of `whole_length` is `blocks` equal blocks, each split by
// tensor_parallel_range, and the part is this rank's range of each block in
// block order. One block for most layers; a fused projection's output (GPT-2's
// c_attn holds queries, keys and values side by side: 3 blocks) splits each
// block alike, so every rank holds whole heads of all three.
struct TensorParallelPart {
  at::Tensor tensor;  // this rank's part, the module's own tensor
  int64_t dim = 0;    // split along
  int64_t whole_length = 0;
  TensorParallel tp;
  int64_t blocks = 1;
};

// The whole tensor of which every rank of the group holds a part laid out
// as `layout` says (`part` is the layout's tensor or one of the same shape,
// an optimizer's state of it, say). Uneven splits too. For saving split
// weights whole; not differentiable. Collective.
at::Tensor gather_whole(const at::Tensor& part, const TensorParallelPart& layout);
// The inverse: this rank's part of `whole`, a tensor of its own (contiguous).
at::Tensor part_of_whole(const at::Tensor& whole, const TensorParallelPart& layout);

// Megatron's sequence parallelism: between the tensor-parallel layers the
// activations [batch, tokens, ...] are split along tokens (dimension 1) over
// the group, so norms, dropout and residuals run on 1/tp of them.
// Before a column-parallel layer: forward every rank's tokens gathered;
// backward the sum of every rank's gradient, reduced and scattered (each
// rank's layer part read all tokens).
at::Tensor gather_tokens(const at::Tensor& x, const TensorParallel& tp);
// After a row-parallel layer: forward the sum of every rank's partial `x`,
// each rank keeping its 1/tp of the tokens (divisible); backward the
// gradient's parts gathered. The same bytes as the all-reduce it replaces.
at::Tensor reduce_scatter_tokens(const at::Tensor& x, const TensorParallel& tp);
// Where replicated activations enter (after the embedding): forward this
// rank's 1/tp of the tokens; backward every rank's gradient part gathered.
at::Tensor scatter_tokens(const at::Tensor& x, const TensorParallel& tp);

// Dropout at tp (Megatron's two random streams). Replicated activations,
// which every rank of a group holds alike, must be dropped alike, and are by
// at::dropout: it draws from the default generator, which set_seed seeds
// alike in every process, and every rank draws the same numbers in the same
// order. A rank's part of a split computation (its attention heads; its
// tokens under sequence parallelism) needs a mask of its own, or every part
// of a group repeats one pattern. split_dropout draws that mask from a
// generator seeded by one number of the default CPU generator (alike on
// every rank) mixed with the rank: the ranks' masks differ, the same seed
// gives the same masks, and activation checkpointing's recomputation and
// load_state restore them with the default generator. Thread ranks of one
// process share the default generator: they agree only without dropout.
// Without tp (a group of one) split_dropout is at::dropout.
at::Tensor split_dropout(const at::Tensor& x, double p, bool train, const TensorParallel& tp);
// Dropout of the activations between the split layers (after the
// embedding, on a residual branch): replicated ones (at::dropout) without
// sequence parallelism, this rank's tokens (split_dropout) with it.
at::Tensor dropout_between_layers(const at::Tensor& x, double p, bool train,
                                  const TensorParallel& tp);
// The generator split_dropout would draw x's mask from, for a kernel that
// draws its own (attention's dropout_generator); none without tp.
std::optional<at::Generator> split_dropout_generator(const TensorParallel& tp,
                                                     const at::Tensor& like);

}  // namespace accelerate
