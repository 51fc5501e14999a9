// Layers that tensor parallelism can split (Megatron-LM's column- and
// row-parallel Linear, vocab-parallel embedding and cross-entropy). Each is
// built whole, exactly as its LibTorch counterpart (same options, parameter
// names, shapes and initialisation, so a model that uses them trains as
// before), and split afterwards by parallelize(), which keeps this rank's
// part of the whole weights and frees the rest:
//
//   accelerate::ParallelLinear up(torch::nn::LinearOptions(512, 2048));
//   accelerate::ParallelLinear down(torch::nn::LinearOptions(2048, 512));
//   up->parallelize(accelerate::TensorParallelStyle::kColwise, tp);   // weight [2048/tp, 512]
//   down->parallelize(accelerate::TensorParallelStyle::kRowwise, tp); // weight [512, 2048/tp]
//   auto y = down(gelu(up(x)));  // x, y: [..., 512] whole on every rank
//
// Every rank of the group must have built the same whole weights (the same
// seed, or loaded the same checkpoint) before it splits them. A model's plan
// (tensor_parallel_plan.h) calls parallelize() for it by module names.
// Styles are named as transformers' tp_plan names them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/cloneable.h>
#include <torch/nn/options/embedding.h>
#include <torch/nn/options/linear.h>
#include <torch/nn/pimpl.h>

#include "accelerate/nn/cross_entropy.h"
#include "accelerate/nn/tensor_parallel.h"

namespace accelerate {
namespace detail {
struct LinearSplit;  // src/nn/split_linear.h
}  // namespace detail

enum class TensorParallelStyle {
  kReplicate,   // "replicate": whole on every rank (the default)
  kColwise,     // "colwise": output features split, result split
  kColwiseRep,  // "colwise_rep": output features split, result gathered whole
  kRowwise,     // "rowwise": input features split (a Linear), vocabulary split
                // (an embedding); result summed whole
};
const char* to_string(TensorParallelStyle style);
// transformers' word for a style; nullopt for any other text.
std::optional<TensorParallelStyle> parse_tensor_parallel_style(const std::string& text);

// A layer tensor parallelism can split: what parallelize_module splits by
// a plan's words, and what the functions on split models read
// (tensor_parallel_parts, whole_tensor_parallel_weights, and through them
// the Accelerator's clipping and checkpoints). ParallelLinear and
// ParallelEmbedding are ones; GPT-2's Conv1D is one with its weights
// stored [in, out]; a program's own layer can be one.
class TensorParallelLayer {
 public:
  virtual ~TensorParallelLayer() = default;
  // Keeps this rank's part of the layer's tensors for `style` and computes
  // its part from now on. Once; refused in one line for a second split or a
  // style (or sequence parallelism) the layer cannot take. kReplicate or a
  // group of one changes nothing.
  virtual void parallelize(TensorParallelStyle style, const TensorParallel& tp,
                           bool sequence_parallel) = 0;
  virtual TensorParallelStyle style() const = 0;
  virtual const TensorParallel& tensor_parallel() const = 0;
  // This rank's parts of the layer's split tensors, with where each lies in
  // its whole; empty while the layer is whole.
  virtual std::vector<TensorParallelPart> split_parts() const = 0;
};

// torch::nn::Linear that tensor parallelism can split. Forward by style:
//   replicate:   x [..., in] -> [..., out], as torch::nn::Linear
//   colwise:     x [..., in] whole -> this rank's [..., out part] (bias split too)
//   colwise_rep: x [..., in] whole -> [..., out] whole (all-gathered; tp must
//                divide out)
//   rowwise:     x [..., in part] (a colwise layer's result), or whole
//                [..., in] (this rank's part taken) -> [..., out] whole,
//                summed over the group, the bias added once after the sum
// The parts are tensor_parallel_range's, so uneven splits work except where
// results are gathered.
class ParallelLinearImpl : public torch::nn::Cloneable<ParallelLinearImpl>,
                           public TensorParallelLayer {
 public:
  ParallelLinearImpl(int64_t in_features, int64_t out_features)
      : ParallelLinearImpl(torch::nn::LinearOptions(in_features, out_features)) {}
  explicit ParallelLinearImpl(const torch::nn::LinearOptions& options);

  // torch::nn::Linear's initialisation, on the whole weights; refused once
  // split (the parts would not be the whole layer's).
  void reset() override;
  void reset_parameters();

  // Keeps this rank's part for `style` and remembers the style. Once: a
  // split layer is refused a second split. kReplicate or a group of one
  // changes nothing. `sequence_parallel` (Megatron's sequence parallelism,
  // tensor_parallel.h): a colwise layer's input, or a rowwise layer's
  // result, is [batch, tokens / tp, ...], this rank's tokens: the layer
  // gathers them (colwise) or reduce-scatters its sum to them (rowwise) in
  // place of the all-reduce, and a rowwise bias's gradient, now computed
  // on each rank's tokens, is summed over the group in backward.
  void parallelize(TensorParallelStyle style, const TensorParallel& tp,
                   bool sequence_parallel = false) override;

  at::Tensor forward(const at::Tensor& x);

  const torch::nn::LinearOptions& options() const { return options_; }
  TensorParallelStyle style() const override { return style_; }
  bool sequence_parallel() const { return sequence_parallel_; }
  const TensorParallel& tensor_parallel() const override { return tp_; }
  std::vector<TensorParallelPart> split_parts() const override;
  // The dimension of `weight` split over the group (0: output features, 1:
  // input features), or nullopt when whole; `bias` is split with output
  // features only.
  std::optional<int64_t> weight_split_dim() const;

  at::Tensor weight;  // [out, in] whole; [out part, in] colwise; [out, in part] rowwise
  at::Tensor bias;    // [out] or [out part] (colwise); undefined without bias

 private:
  // weight (and a colwise bias) becomes this rank's part of the whole.
  void keep_own_part();
  detail::LinearSplit split() const;

  torch::nn::LinearOptions options_;
  TensorParallelStyle style_ = TensorParallelStyle::kReplicate;
  bool sequence_parallel_ = false;
  TensorParallel tp_;
};
TORCH_MODULE(ParallelLinear);

// x times this rank's part of a colwise weight [out part, in] (and bias),
// as a colwise layer computes it: f on x (copy_to_tensor_parallel), or under
// tp.sequence_parallel() x's tokens gathered, kept for backward as this
// rank's only. For a head made of another layer's rows (a tied embedding).
at::Tensor colwise_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                          const TensorParallel& tp);

// The results of several layers on one input x, each as layer->forward(x)
// gives it, computed with one input collective when the layers are colwise
// and split alike (the same group and sequence parallelism), as one fused
// layer would be: attention's q, k and v, an MLP's gate and up. Forward and
// backward then move x once, not once per layer (their input gradients add
// up before the one all-reduce, or reduce-scatter under sequence
// parallelism). Layers split otherwise each run their own forward.
std::vector<at::Tensor> forward_sharing_input(const at::Tensor& x,
                                              const std::vector<ParallelLinear>& layers);

// torch::nn::Embedding (no padding_idx, max_norm or sparse) that tensor
// parallelism can split by vocabulary ("rowwise"): each rank holds the rows
// of its tensor_parallel_range of the vocabulary, looks up the ids in it
// (the others give zeros) and the group sums the results, so every rank gets
// the whole [..., dim] embedding. Any vocabulary size splits.
class ParallelEmbeddingImpl : public torch::nn::Cloneable<ParallelEmbeddingImpl>,
                              public TensorParallelLayer {
 public:
  ParallelEmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim)
      : ParallelEmbeddingImpl(torch::nn::EmbeddingOptions(num_embeddings, embedding_dim)) {}
  // Error (one line) for the options the split cannot keep.
  explicit ParallelEmbeddingImpl(const torch::nn::EmbeddingOptions& options);

  void reset() override;
  void reset_parameters();  // N(0, 1), as torch::nn::Embedding
  // kReplicate or kRowwise; other styles are refused with one line.
  // `sequence_parallel` (split rowwise): the result is this rank's tokens,
  // [batch, tokens / tp, dim], the group's sum reduce-scattered (Megatron's
  // embedding under sequence parallelism: the bytes of the all-reduce it
  // replaces); the tokens must divide by tp.
  void parallelize(TensorParallelStyle style, const TensorParallel& tp,
                   bool sequence_parallel = false) override;
  at::Tensor forward(const at::Tensor& input_ids);

  const torch::nn::EmbeddingOptions& options() const { return options_; }
  TensorParallelStyle style() const override { return style_; }
  const TensorParallel& tensor_parallel() const override { return tp_; }
  std::vector<TensorParallelPart> split_parts() const override;
  // The vocabulary rows this rank holds (all of them when whole).
  TensorParallelRange vocabulary_range() const;

  at::Tensor weight;  // [vocabulary part, dim]

 private:
  torch::nn::EmbeddingOptions options_;
  TensorParallelStyle style_ = TensorParallelStyle::kReplicate;
  bool sequence_parallel_ = false;
  TensorParallel tp_;
};
TORCH_MODULE(ParallelEmbedding);

// Cross-entropy of logits whose classes are split over the group
// (a colwise head's result: this rank's classes tensor_parallel_range(
// classes, tp)), against targets [rows] of the whole vocabulary, without
// the whole logits on any process: the group all-reduces each row's
// maximum, sum of exponentials and target logit (three [rows] float
// vectors). Equal to cross_entropy() on the gathered logits to float
// rounding, the same value on every rank; the gradient of each rank's
// logits is its own part (nothing is sent backward). In float whatever the
// logits' type; keeps the logits and two floats per row for backward.
// `classes`: the whole vocabulary. Errors (one line) as cross_entropy's.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits_part, const at::Tensor& targets,
                                        int64_t classes, const TensorParallel& tp,
                                        CrossEntropyOptions options = {});

}  // namespace accelerate
