#include "nn/causal_softmax.h"
#include "compat/parallel_ranges.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <vector>

#include "nn/causal_softmax_kernels.h"
#include "nn/kernel_tensors.h"

namespace accelerate {
namespace detail {
namespace {

// Scores per task of compat::parallel_ranges.
constexpr int64_t kGrainElements = 1 << 15;

CausalRows rows_of(const at::Tensor& scores, double scale) {
  const int64_t keys = scores.size(-1), queries = scores.size(-2);
  return {scores.numel() / std::max<int64_t>(1, keys), queries, keys, keys - queries,
          static_cast<float>(scale)};
}

// Runs fn(first element, rows) over the scores in parallel tasks of whole
// [queries, keys] matrices, so that a row's index modulo queries inside a
// task is its query index (the kernels' seen_keys relies on it).
template <typename Fn>
void for_row_blocks(const CausalRows& shape, const Fn& fn) {
  const int64_t grain = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, shape.keys));
  const int64_t matrices = shape.rows / std::max<int64_t>(1, shape.queries);
  const int64_t matrix_grain = std::max<int64_t>(1, grain / std::max<int64_t>(1, shape.queries));
  compat::parallel_ranges(matrices, matrix_grain, [&](int64_t begin, int64_t end) {
    CausalRows block = shape;
    block.rows = (end - begin) * shape.queries;
    fn(begin * shape.queries * shape.keys, block);
  });
}

}  // namespace

at::Tensor causal_softmax_probs(const at::Tensor& scores, double scale) {
  at::Tensor probs = at::empty(scores.sizes(), scores.options());
  causal_softmax_probs_into(scores, scale, probs);
  return probs;
}

void causal_softmax_probs_into(const at::Tensor& scores_in, double scale, const at::Tensor& probs) {
  const at::Tensor scores = scores_in.contiguous();
  for_row_blocks(rows_of(scores, scale), [&](int64_t first, const CausalRows& block) {
    if (scores.scalar_type() == at::kFloat) {
      causal_softmax_forward(scores.data_ptr<float>() + first, probs.data_ptr<float>() + first,
                             block);
    } else {
      causal_softmax_forward(bf16_bits(scores) + first, bf16_bits(probs) + first, block);
    }
  });
}

at::Tensor causal_softmax_grad(const at::Tensor& probs, const at::Tensor& grad_probs,
                               double scale) {
  const at::Tensor grad = grad_probs.to(probs.scalar_type()).contiguous();
  at::Tensor grad_scores = at::empty_like(probs);
  for_row_blocks(rows_of(probs, scale), [&](int64_t first, const CausalRows& block) {
    if (probs.scalar_type() == at::kFloat) {
      causal_softmax_backward(probs.data_ptr<float>() + first, grad.data_ptr<float>() + first,
                              grad_scores.data_ptr<float>() + first, block);
    } else {
      causal_softmax_backward(bf16_bits(probs) + first, bf16_bits(grad) + first,
                              bf16_bits(grad_scores) + first, block);
    }
  });
  return grad_scores;
}

namespace {

struct FusedCausalSoftmax : torch::autograd::Function<FusedCausalSoftmax> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& scores,
                            double scale) {
    // Named in profiler traces (an autograd Function's forward is not an op).
    RECORD_FUNCTION("accelerate::causal_softmax", std::vector<c10::IValue>({scores}));
    at::Tensor probs = causal_softmax_probs(scores, scale);
    ctx->save_for_backward({probs});
    ctx->saved_data["scale"] = scale;
    return probs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {causal_softmax_grad(ctx->get_saved_variables()[0], grads[0],
                                ctx->saved_data["scale"].toDouble()),
            at::Tensor()};
  }
};

}  // namespace

bool has_fused_causal_softmax(const at::Tensor& scores) {
  return fused_kernel_takes(scores) && scores.dim() >= 2;
}

at::Tensor fused_causal_softmax(const at::Tensor& scores, double scale) {
  return FusedCausalSoftmax::apply(scores, scale);
}

}  // namespace detail
}  // namespace accelerate
