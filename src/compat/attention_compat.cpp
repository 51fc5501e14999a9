#include "compat/attention_compat.h"

#include <ATen/ATen.h>

#include "accelerate/common/errors.h"
#include "accelerate_compat_config.h"

namespace accelerate {
namespace compat {

bool has_fused_attention() { return ACCELERATE_COMPAT_HAS_SDPA != 0; }

at::Tensor fused_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  double dropout_p) {
#if ACCELERATE_COMPAT_HAS_SDPA
  return at::scaled_dot_product_attention(q, k, v, c10::nullopt, dropout_p, /*is_causal=*/true);
#else
  (void)q, (void)k, (void)v, (void)dropout_p;
  throw Error("this LibTorch has no fused attention (at::scaled_dot_product_attention, 2.0+)");
#endif
}

at::Tensor fused_masked_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& additive_mask, double dropout_p) {
#if ACCELERATE_COMPAT_HAS_SDPA
  const c10::optional<at::Tensor> mask =
      additive_mask.defined() ? c10::optional<at::Tensor>(additive_mask) : c10::nullopt;
  return at::scaled_dot_product_attention(q, k, v, mask, dropout_p, /*is_causal=*/false);
#else
  (void)q, (void)k, (void)v, (void)additive_mask, (void)dropout_p;
  throw Error("this LibTorch has no fused attention (at::scaled_dot_product_attention, 2.0+)");
#endif
}

}  // namespace compat
}  // namespace accelerate
