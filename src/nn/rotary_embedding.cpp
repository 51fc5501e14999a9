#include "accelerate/nn/rotary_embedding.h"
#include "compat/parallel_ranges.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "accelerate/common/errors.h"
#include "nn/kernel_tensors.h"
#include "nn/rotary_kernels.h"

namespace accelerate {
namespace {

// [.., d] -> [-second half, first half], transformers' rotate_half.
at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// transformers' apply_rotary_pos_emb on the [batch, tokens, heads, d] layout.
at::Tensor composite_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return x * cos.unsqueeze(1) + rotate_half(x) * sin.unsqueeze(1);
}

// One pass over in (x forward, the gradient backward) into out.
void rotate(const at::Tensor& in, const at::Tensor& cos, const at::Tensor& sin,
            const at::Tensor& out, bool backward) {
  const int64_t rows = in.size(0) * in.size(1), tokens = in.size(1), heads = in.size(2),
                dim = in.size(3);
  const int64_t grain = std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, heads * dim));
  compat::parallel_ranges(rows, grain, [&](int64_t begin, int64_t end) {
    const int64_t offset = begin * heads * dim, count = end - begin;
    if (in.scalar_type() == at::kFloat) {
      const float *from = in.data_ptr<float>() + offset, *c = cos.data_ptr<float>(),
                  *s = sin.data_ptr<float>();
      float* to = out.data_ptr<float>() + offset;
      if (backward) {
        detail::rotary_backward(from, c, s, to, begin, count, tokens, heads, dim);
      } else {
        detail::rotary_forward(from, c, s, to, begin, count, tokens, heads, dim);
      }
    } else {
      const uint16_t *from = detail::bf16_bits(in) + offset, *c = detail::bf16_bits(cos),
                     *s = detail::bf16_bits(sin);
      uint16_t* to = detail::bf16_bits(out) + offset;
      if (backward) {
        detail::rotary_backward(from, c, s, to, begin, count, tokens, heads, dim);
      } else {
        detail::rotary_forward(from, c, s, to, begin, count, tokens, heads, dim);
      }
    }
  });
}

struct FusedRotary : torch::autograd::Function<FusedRotary> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& cos, const at::Tensor& sin) {
    RECORD_FUNCTION("accelerate::rotary_embedding", std::vector<c10::IValue>({x}));
    const at::Tensor c = cos.contiguous(), s = sin.contiguous();
    const at::Tensor input = x.contiguous();
    at::Tensor y = at::empty_like(input);
    rotate(input, c, s, y, /*backward=*/false);
    ctx->save_for_backward({c, s});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor grad = grads[0].to(saved[0].scalar_type()).contiguous();
    at::Tensor dx = at::empty_like(grad);
    rotate(grad, saved[0], saved[1], dx, /*backward=*/true);
    return {dx, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor rotary_embedding(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const bool shapes = x.dim() == 4 && cos.dim() == 2 && cos.sizes().equals(sin.sizes()) &&
                      cos.size(0) == x.size(1) && cos.size(1) == x.size(3) && x.size(3) % 2 == 0;
  if (!shapes) {
    throw Error(
        "rotary_embedding: expects x [batch, tokens, heads, head_dim] (head_dim even) and "
        "cos, sin [tokens, head_dim], got x " +
        c10::str(x.sizes()) + ", cos " + c10::str(cos.sizes()) + ", sin " + c10::str(sin.sizes()));
  }
  if (!detail::fused_kernel_takes(x) || cos.scalar_type() != x.scalar_type() ||
      sin.scalar_type() != x.scalar_type() || !cos.device().is_cpu() || !sin.device().is_cpu()) {
    return composite_rotary(x, cos, sin);
  }
  return FusedRotary::apply(x, cos, sin);
}

}  // namespace accelerate
