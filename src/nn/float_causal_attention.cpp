#include "nn/float_causal_attention.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <vector>

#include "compat/autocast_compat.h"
#include "nn/attention_blocks.h"
#include "nn/causal_softmax_kernels.h"
#include "nn/small_gemm.h"

namespace accelerate {
namespace detail {
namespace {

// A [batch, heads, tokens, head_dim] float tensor as batch x heads matrices
// of [tokens, head_dim], matrix m = b * heads + h, read through its strides.
struct HeadMatrices {
  const float* data;
  int64_t heads, head_dim, batch_stride, head_stride, token_stride, dim_stride;

  explicit HeadMatrices(const at::Tensor& t)
      : data(t.data_ptr<float>()),
        heads(t.size(1)),
        head_dim(t.size(3)),
        batch_stride(t.stride(0)),
        head_stride(t.stride(1)),
        token_stride(t.stride(2)),
        dim_stride(t.stride(3)) {}

  const float* start(int64_t m) const {
    return data + (m / heads) * batch_stride + (m % heads) * head_stride;
  }
  // The rows (tokens) [first, first + count) of matrix m.
  StridedMatrix rows(int64_t m, int64_t first, int64_t count) const {
    return {start(m) + first * token_stride, count, head_dim, token_stride, dim_stride};
  }
};

// The writable side of a tensor made by token_major: row t of matrix m.
struct HeadRows {
  float* data;
  int64_t heads, batch_stride, head_stride, token_stride;

  explicit HeadRows(const at::Tensor& t)
      : data(t.data_ptr<float>()),
        heads(t.size(1)),
        batch_stride(t.stride(0)),
        head_stride(t.stride(1)),
        token_stride(t.stride(2)) {}

  float* row(int64_t m, int64_t t) const {
    return data + (m / heads) * batch_stride + (m % heads) * head_stride + t * token_stride;
  }
};

// A new tensor of like's [batch, heads, tokens, head_dim] shape laid out as
// [batch, tokens, heads, head_dim].
at::Tensor token_major(const at::Tensor& like) {
  const int64_t heads = like.size(1), tokens = like.size(2), head_dim = like.size(3);
  return at::empty_strided(like.sizes(), {tokens * heads * head_dim, head_dim, heads * head_dim, 1},
                           like.options());
}

std::vector<float*> block_data(const std::vector<at::Tensor>& probs) {
  std::vector<float*> data;
  for (const at::Tensor& p : probs) data.push_back(p.data_ptr<float>());
  return data;
}

// A block's probabilities (or their gradient) of matrix m: [rows, seen].
float* block_matrix(float* block_data, const QueryBlock& block, int64_t m) {
  return block_data + m * block.rows * block.seen();
}

CausalRows causal_rows(const QueryBlock& block, double scale) {
  return {block.rows, block.rows, block.seen(), block.first, static_cast<float>(scale)};
}

StridedMatrix row_major(const float* data, int64_t rows, int64_t cols) {
  return {data, rows, cols, cols, 1};
}

struct Inputs {
  HeadMatrices q, k, v;
};

void forward_matrices(const Inputs& in, const std::vector<QueryBlock>& blocks,
                      const std::vector<float*>& probs, const HeadRows& out, double scale,
                      int64_t begin, int64_t end) {
  std::vector<float> scratch;
  for (int64_t m = begin; m < end; ++m) {
    for (size_t b = 0; b < blocks.size(); ++b) {
      const QueryBlock& block = blocks[b];
      float* p = block_matrix(probs[b], block, m);
      small_gemm(in.q.rows(m, block.first, block.rows), in.k.rows(m, 0, block.seen()).transposed(),
                 p, block.seen(), /*accumulate=*/false, scratch);
      causal_softmax_forward(p, p, causal_rows(block, scale));
      small_gemm(row_major(p, block.rows, block.seen()), in.v.rows(m, 0, block.seen()),
                 out.row(m, block.first), out.token_stride, /*accumulate=*/false, scratch);
    }
  }
}

struct Gradients {
  HeadRows q, k, v;
};

// The blocks run last to first: the last sees every key, so its products
// write the keys' and values' gradients whole and the earlier ones add to
// them (no zero fill).
void backward_matrices(const Inputs& in, const HeadMatrices& grad,
                       const std::vector<QueryBlock>& blocks, const std::vector<float*>& probs,
                       const Gradients& out, double scale, int64_t begin, int64_t end) {
  std::vector<float> scratch, grad_scores;
  for (int64_t m = begin; m < end; ++m) {
    bool accumulate = false;
    for (size_t b = blocks.size(); b-- > 0;) {
      const QueryBlock& block = blocks[b];
      const int64_t rows = block.rows, seen = block.seen();
      const float* p = block_matrix(probs[b], block, m);
      const StridedMatrix grad_rows = grad.rows(m, block.first, rows);
      small_gemm(row_major(p, rows, seen).transposed(), grad_rows, out.v.row(m, 0),
                 out.v.token_stride, accumulate, scratch);
      grad_scores.resize(static_cast<size_t>(rows * seen));
      small_gemm(grad_rows, in.v.rows(m, 0, seen).transposed(), grad_scores.data(), seen,
                 /*accumulate=*/false, scratch);
      causal_softmax_backward(p, grad_scores.data(), grad_scores.data(), causal_rows(block, scale));
      const StridedMatrix d_scores = row_major(grad_scores.data(), rows, seen);
      small_gemm(d_scores, in.k.rows(m, 0, seen), out.q.row(m, block.first), out.q.token_stride,
                 /*accumulate=*/false, scratch);
      small_gemm(d_scores.transposed(), in.q.rows(m, block.first, rows), out.k.row(m, 0),
                 out.k.token_stride, accumulate, scratch);
      accumulate = true;
    }
  }
}

int64_t matrix_count(const at::Tensor& q) { return q.size(0) * q.size(1); }

struct FloatCausalAttention : torch::autograd::Function<FloatCausalAttention> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, double scale,
                            int64_t query_block) {
    RECORD_FUNCTION("accelerate::blocked_causal_attention", std::vector<c10::IValue>({q, k, v}));
    const std::vector<QueryBlock> blocks = query_blocks(q.size(2), query_block);
    const std::vector<at::Tensor> probs = block_probabilities(matrix_count(q), blocks, q.options());
    at::Tensor out = token_major(q);
    const Inputs in{HeadMatrices(q), HeadMatrices(k), HeadMatrices(v)};
    const std::vector<float*> prob_data = block_data(probs);
    const HeadRows out_rows(out);
    for_matrix_ranges(matrix_count(q), [&](int64_t begin, int64_t end) {
      forward_matrices(in, blocks, prob_data, out_rows, scale, begin, end);
    });
    save_blocks(ctx, q, k, v, probs, scale, query_block);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const SavedBlocks saved = saved_blocks(ctx, /*token_dim=*/2);
    const at::Tensor &q = saved.q, &k = saved.k, &v = saved.v;
    const at::Tensor grad = grads[0].to(at::kFloat);
    at::Tensor grad_q = token_major(q), grad_k = token_major(k), grad_v = token_major(v);
    const Inputs in{HeadMatrices(q), HeadMatrices(k), HeadMatrices(v)};
    const HeadMatrices grad_in(grad);
    const std::vector<float*> prob_data = block_data(saved.probs);
    const Gradients out{HeadRows(grad_q), HeadRows(grad_k), HeadRows(grad_v)};
    for_matrix_ranges(matrix_count(q), [&](int64_t begin, int64_t end) {
      backward_matrices(in, grad_in, saved.blocks, prob_data, out, saved.scale, begin, end);
    });
    return {grad_q, grad_k, grad_v, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool float_causal_attention_takes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const bool autocast_to_other = compat::autocast_enabled(c10::DeviceType::CPU) &&
                                 compat::autocast_dtype(c10::DeviceType::CPU) != at::kFloat;
  for (const at::Tensor* t : {&q, &k, &v}) {
    if (!t->device().is_cpu() || t->layout() != at::kStrided || t->scalar_type() != at::kFloat) {
      return false;
    }
  }
  return !autocast_to_other && small_gemm_preferred();
}

at::Tensor float_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  double scale, int64_t query_block) {
  return FloatCausalAttention::apply(q, k, v, scale, std::max<int64_t>(1, query_block));
}

}  // namespace detail
}  // namespace accelerate
