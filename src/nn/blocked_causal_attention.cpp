#include "nn/blocked_causal_attention.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <vector>

#include "accelerate/common/errors.h"
#include "compat/autocast_compat.h"
#include "compat/blas_threads.h"
#include "nn/attention_blocks.h"
#include "nn/causal_softmax.h"
#include "nn/float_causal_attention.h"

namespace accelerate {
namespace detail {
namespace {

// [batch, heads, tokens, head_dim] -> contiguous [batch x heads, tokens,
// head_dim] (a copy when the heads are a view of a fused projection, which
// LibTorch's matmul would make as well).
at::Tensor as_matrices(const at::Tensor& t, c10::ScalarType dtype) {
  return t.to(dtype).contiguous().view({t.size(0) * t.size(1), t.size(2), t.size(3)});
}

// The matrices [begin, begin + count) of a [matrices, rows, columns] tensor.
struct MatrixRange {
  int64_t begin, count;
  at::Tensor operator()(const at::Tensor& t) const { return t.narrow(0, begin, count); }
};

// The products' type: under CPU autocast its lower precision (the operands
// are cast once, as LibTorch's matmul would cast them), else q's.
c10::ScalarType product_dtype(const at::Tensor& q) {
  return compat::autocast_enabled(c10::DeviceType::CPU)
             ? compat::autocast_dtype(c10::DeviceType::CPU)
             : q.scalar_type();
}

// The query blocks of the matrices [begin, end): for each block, its
// queries' scores against the keys up to its last query, their causal
// softmax (into `probs`, one tensor per block), and the output rows.
void forward_matrices(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const std::vector<QueryBlock>& blocks, const std::vector<at::Tensor>& probs,
                      at::Tensor& out, double scale, int64_t begin, int64_t end) {
  const MatrixRange matrices{begin, end - begin};
  for (size_t block = 0; block < blocks.size(); ++block) {
    const int64_t first = blocks[block].first, rows = blocks[block].rows,
                  seen = blocks[block].seen();
    // The scores go straight into the block's saved probabilities, which
    // the softmax then overwrites in place.
    at::Tensor block_probs = matrices(probs[block]);
    at::bmm_out(block_probs, matrices(q).narrow(1, first, rows),
                matrices(k).narrow(1, 0, seen).transpose(1, 2));
    causal_softmax_probs_into(block_probs, scale, block_probs);
    at::Tensor out_rows = matrices(out).narrow(1, first, rows);
    at::bmm_out(out_rows, block_probs, matrices(v).narrow(1, 0, seen));
  }
}

// The gradients of the matrices [begin, end), block by block: each block's
// probabilities give the values' gradient up to its last query, the scores'
// gradient (the fused softmax's backward), and from it the queries' rows
// and the keys' gradient up to its last query.
void backward_matrices(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const std::vector<QueryBlock>& blocks, const std::vector<at::Tensor>& probs,
                       const at::Tensor& grad, at::Tensor& grad_q, at::Tensor& grad_k,
                       at::Tensor& grad_v, double scale, int64_t begin, int64_t end) {
  const MatrixRange matrices{begin, end - begin};
  for (size_t block = 0; block < blocks.size(); ++block) {
    const int64_t first = blocks[block].first, rows = blocks[block].rows,
                  seen = blocks[block].seen();
    const at::Tensor block_probs = matrices(probs[block]);
    const at::Tensor grad_rows = matrices(grad).narrow(1, first, rows);
    matrices(grad_v).narrow(1, 0, seen).baddbmm_(block_probs.transpose(1, 2), grad_rows);
    const at::Tensor grad_scores = causal_softmax_grad(
        block_probs, at::bmm(grad_rows, matrices(v).narrow(1, 0, seen).transpose(1, 2)), scale);
    at::Tensor grad_q_rows = matrices(grad_q).narrow(1, first, rows);
    at::bmm_out(grad_q_rows, grad_scores, matrices(k).narrow(1, 0, seen));
    matrices(grad_k)
        .narrow(1, 0, seen)
        .baddbmm_(grad_scores.transpose(1, 2), matrices(q).narrow(1, first, rows));
  }
}

// for_matrix_ranges with each thread's products on one-threaded BLAS
// calls: OpenBLAS would split every small product over its own threads,
// which on two threads took longer than on one.
template <typename Fn>
void for_matrix_ranges_on_blas(int64_t matrices, const Fn& fn) {
  if (at::get_num_threads() <= 1 || matrices < 2) return fn(0, matrices);
  const compat::OneThreadedBlas one_threaded;
  for_matrix_ranges(matrices, fn);
}

struct BlockedCausalAttention : torch::autograd::Function<BlockedCausalAttention> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q_in,
                            const at::Tensor& k_in, const at::Tensor& v_in, double scale,
                            int64_t query_block) {
    RECORD_FUNCTION("accelerate::blocked_causal_attention",
                    std::vector<c10::IValue>({q_in, k_in, v_in}));
    const c10::ScalarType dtype = product_dtype(q_in);
    const at::Tensor q = as_matrices(q_in, dtype), k = as_matrices(k_in, dtype),
                     v = as_matrices(v_in, dtype);
    at::Tensor out = at::empty_like(q);
    const std::vector<QueryBlock> blocks = query_blocks(q.size(1), query_block);
    const std::vector<at::Tensor> probs = block_probabilities(q.size(0), blocks, q.options());
    for_matrix_ranges_on_blas(q.size(0), [&](int64_t begin, int64_t end) {
      forward_matrices(q, k, v, blocks, probs, out, scale, begin, end);
    });
    save_blocks(ctx, q, k, v, probs, scale, query_block);
    return out.view(q_in.sizes());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const SavedBlocks saved = saved_blocks(ctx, /*token_dim=*/1);
    const at::Tensor &q = saved.q, &k = saved.k, &v = saved.v;
    const at::Tensor grad = grads[0].to(q.scalar_type()).contiguous().view(q.sizes());
    at::Tensor grad_q = at::empty_like(q), grad_k = at::zeros_like(k), grad_v = at::zeros_like(v);
    for_matrix_ranges_on_blas(q.size(0), [&](int64_t begin, int64_t end) {
      backward_matrices(q, k, v, saved.blocks, saved.probs, grad, grad_q, grad_k, grad_v,
                        saved.scale, begin, end);
    });
    const auto shape = grads[0].sizes();
    return {grad_q.view(shape), grad_k.view(shape), grad_v.view(shape), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool blocked_causal_attention_takes(const at::Tensor& q) {
  const c10::ScalarType dtype = product_dtype(q);
  return q.device().is_cpu() && q.layout() == at::kStrided &&
         (dtype == at::kFloat || dtype == at::kBFloat16);
}

at::Tensor blocked_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    double scale, int64_t query_block, BlockProducts products) {
  const bool own_takes = float_causal_attention_takes(q, k, v);
  if (products == BlockProducts::kSmallGemm && !own_takes) {
    throw Error(
        "blocked_causal_attention: the library's own products take float q, k, v on a CPU with "
        "AVX-512 only");
  }
  if (own_takes && products != BlockProducts::kLibTorch) {
    return float_causal_attention(q, k, v, scale, query_block);
  }
  return BlockedCausalAttention::apply(q, k, v, scale, std::max<int64_t>(1, query_block));
}

}  // namespace detail
}  // namespace accelerate
