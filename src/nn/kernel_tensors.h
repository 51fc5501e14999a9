// What the library's fused CPU kernels (src/nn/*_kernels.h) take, and the
// element pointers they are called with: bfloat16 as its raw 16 bits.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace accelerate {
namespace detail {

// CPU, strided, float or bfloat16: elsewhere the callers use LibTorch's ops.
inline bool fused_kernel_takes(const at::Tensor& t) {
  return t.device().is_cpu() && t.layout() == at::kStrided &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16);
}

// A bfloat16 tensor's elements as their bits (the kernels' bfloat16 form).
inline uint16_t* bf16_bits(const at::Tensor& t) {
  return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>());
}

}  // namespace detail
}  // namespace accelerate
