// LibTorch 1.13's CPU autocast leaves layer_norm alone, and its CPU kernel
// refuses a bf16 input with fp32 weights ("expected scalar type BFloat16 but
// found Float"): every post-LayerNorm block (Linear, then LayerNorm) fails
// in bf16 there. LibTorch 2.x's kernel takes the mixed dtypes. Where the
// kernel refuses them, autocast gets what CUDA's autocast does for
// layer_norm: compute it in fp32. Decided by trying the kernel once, not by
// version: it is the kernel's behaviour that matters.
#include "compat/autocast_compat.h"

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <mutex>

namespace accelerate {
namespace compat {
namespace {

bool takes_mixed_dtypes() {
  try {
    const at::Tensor weight = at::ones({2});
    at::layer_norm(at::ones({1, 2}, at::kBFloat16), {2}, weight, weight);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

at::Tensor layer_norm_in_fp32(const at::Tensor& input, c10::IntArrayRef normalized_shape,
                              const c10::optional<at::Tensor>& weight,
                              const c10::optional<at::Tensor>& bias, double eps,
                              bool cudnn_enable) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
  const bool low = input.scalar_type() == at::kBFloat16;
  return at::layer_norm(low ? input.to(at::kFloat) : input, normalized_shape, weight, bias, eps,
                        cudnn_enable);
}

}  // namespace

void ensure_cpu_autocast_layer_norm() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (takes_mixed_dtypes()) return;
    // Lives as long as the process: the registration is undone when it dies.
    static auto* library = new torch::Library(torch::Library::IMPL, "aten",
                                              c10::DispatchKey::AutocastCPU, __FILE__, __LINE__);
    library->impl("layer_norm", TORCH_FN(layer_norm_in_fp32));
  });
}

}  // namespace compat
}  // namespace accelerate
