#include "accelerate/precision/autocast.h"

#include <ATen/autocast_mode.h>

#include "accelerate/common/errors.h"
#include "compat/autocast_compat.h"

namespace accelerate {

AutocastGuard::AutocastGuard(c10::DeviceType device, c10::ScalarType dtype, AutocastOptions options)
    : device_(device) {
  if (dtype != c10::kBFloat16 && dtype != c10::kHalf) {
    throw ConfigError(std::string("autocast casts to bf16 or fp16, not ") + c10::toString(dtype));
  }
  if (device == c10::kCPU && dtype == c10::kHalf && options.enabled()) {
    throw ConfigError(
        "fp16 autocast is not available on the CPU; use mixed_precision 'bf16' there "
        "(fp16 needs a CUDA device)");
  }
  if (device == c10::kCPU && options.enabled()) compat::ensure_cpu_autocast_layer_norm();
  previous_enabled_ = compat::autocast_enabled(device);
  previous_dtype_ = compat::autocast_dtype(device);
  previous_cache_enabled_ = at::autocast::is_autocast_cache_enabled();
  // The dtype first: enabling with a stale dtype would cast to the old one.
  if (options.enabled()) compat::set_autocast_dtype(device, dtype);
  compat::set_autocast_enabled(device, options.enabled());
  at::autocast::increment_nesting();
  at::autocast::set_autocast_cache_enabled(options.cache_enabled());
  cache_enabled_ = options.cache_enabled();
  active_ = true;
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // As Python's torch.autocast: leaving the outermost region drops the cache.
  // So does leaving a region that turned caching on inside one that had it
  // off (the Accelerator's region around the whole loop): its copies must
  // not outlive it there either, and nothing else would ever drop them.
  const bool outermost = at::autocast::decrement_nesting() == 0;
  const bool began_caching = cache_enabled_ && !previous_cache_enabled_;
  if (outermost || began_caching) at::autocast::clear_cache();
  compat::set_autocast_enabled(device_, previous_enabled_);
  compat::set_autocast_dtype(device_, previous_dtype_);
  at::autocast::set_autocast_cache_enabled(previous_cache_enabled_);
}

bool autocast_enabled(c10::DeviceType device) { return compat::autocast_enabled(device); }

c10::ScalarType autocast_dtype(c10::DeviceType device) { return compat::autocast_dtype(device); }

void clear_autocast_cache() { at::autocast::clear_cache(); }

c10::ScalarType mixed_precision_dtype(MixedPrecision mixed_precision) {
  switch (mixed_precision) {
    case MixedPrecision::kBF16:
      return c10::kBFloat16;
    case MixedPrecision::kFP16:
      return c10::kHalf;
    case MixedPrecision::kNo:
      break;
  }
  throw ConfigError("mixed precision 'no' has no autocast dtype (expected bf16 or fp16)");
}

}  // namespace accelerate
