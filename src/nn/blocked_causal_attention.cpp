#include "nn/blocked_causal_attention.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <vector>

#include "compat/autocast_compat.h"
#include "nn/causal_softmax.h"

namespace accelerate {
namespace detail {
namespace {

// [batch, heads, tokens, head_dim] -> contiguous [batch x heads, tokens,
// head_dim] (a copy when the heads are a view of a fused projection, which
// LibTorch's matmul would make as well).
at::Tensor as_matrices(const at::Tensor& t, c10::ScalarType dtype) {
  return t.to(dtype).contiguous().view({t.size(0) * t.size(1), t.size(2), t.size(3)});
}

// The products' type: under CPU autocast its lower precision (the operands
// are cast once, as LibTorch's matmul would cast them), else q's.
c10::ScalarType product_dtype(const at::Tensor& q) {
  return compat::autocast_enabled(c10::DeviceType::CPU)
             ? compat::autocast_dtype(c10::DeviceType::CPU)
             : q.scalar_type();
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
    const int64_t tokens = q.size(1);
    at::Tensor out = at::empty_like(q);
    torch::autograd::variable_list saved = {q, k, v};
    for (int64_t first = 0; first < tokens; first += query_block) {
      const int64_t rows = std::min(query_block, tokens - first), seen = first + rows;
      const at::Tensor scores =
          at::bmm(q.narrow(1, first, rows), k.narrow(1, 0, seen).transpose(1, 2));
      const at::Tensor probs = causal_softmax_probs(scores, scale);
      at::Tensor out_rows = out.narrow(1, first, rows);
      at::bmm_out(out_rows, probs, v.narrow(1, 0, seen));
      saved.push_back(probs);
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["query_block"] = query_block;
    return out.view(q_in.sizes());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2];
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t query_block = ctx->saved_data["query_block"].toInt();
    const at::Tensor grad = grads[0].to(q.scalar_type()).contiguous().view(q.sizes());
    const int64_t tokens = q.size(1);
    at::Tensor grad_q = at::empty_like(q), grad_k = at::zeros_like(k), grad_v = at::zeros_like(v);
    size_t block = 3;
    for (int64_t first = 0; first < tokens; first += query_block, ++block) {
      const int64_t rows = std::min(query_block, tokens - first), seen = first + rows;
      const at::Tensor& probs = saved[block];
      const at::Tensor grad_rows = grad.narrow(1, first, rows);
      grad_v.narrow(1, 0, seen).baddbmm_(probs.transpose(1, 2), grad_rows);
      const at::Tensor grad_scores = causal_softmax_grad(
          probs, at::bmm(grad_rows, v.narrow(1, 0, seen).transpose(1, 2)), scale);
      at::Tensor grad_q_rows = grad_q.narrow(1, first, rows);
      at::bmm_out(grad_q_rows, grad_scores, k.narrow(1, 0, seen));
      grad_k.narrow(1, 0, seen).baddbmm_(grad_scores.transpose(1, 2), q.narrow(1, first, rows));
    }
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
                                    double scale, int64_t query_block) {
  return BlockedCausalAttention::apply(q, k, v, scale, std::max<int64_t>(1, query_block));
}

}  // namespace detail
}  // namespace accelerate
