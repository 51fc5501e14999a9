// Tensors that share a flat buffer's memory without being autograd views of
// it: the reducer's gradient slices and ZeRO's parameters and shards. Built
// with set_ rather than narrow().view(), so the result can be a parameter's
// data, a leaf the optimizer steps, or a .grad that LibTorch 1.13's
// Optimizer::zero_grad may detach_() (which views refuse). Internal.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/strides.h>

namespace accelerate::detail {

// `sizes` elements (contiguous) of `buffer` from element `offset`.
inline at::Tensor storage_alias(const at::Tensor& buffer, std::int64_t offset,
                                at::IntArrayRef sizes) {
  c10::NoGradGuard no_grad;
  at::Tensor alias = at::empty({0}, buffer.options());
  alias.set_(buffer.storage(), buffer.storage_offset() + offset, sizes,
             c10::contiguous_strides(sizes));
  return alias;
}

}  // namespace accelerate::detail
