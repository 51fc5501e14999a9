// Autocast as a scope: LibTorch C++ has autocast's thread-local switches but
// no RAII guard (Python's torch.autocast). AutocastGuard is that guard, with
// Python's enter/exit behaviour:
//
//   {
//     accelerate::AutocastGuard bf16(torch::kCPU, torch::kBFloat16);
//     auto out = model->forward(x);          // Linear/Conv run in bf16
//     {
//       accelerate::AutocastGuard fp32(torch::kCPU, torch::kBFloat16,
//                                      accelerate::AutocastOptions().enabled(false));
//       auto exact = head->forward(out.to(torch::kFloat));  // fp32 inside
//     }
//   }  // outermost exit: the cache of casted weights is dropped
//
// Autocast state is per thread: a guard affects only the thread that made it,
// and must be destroyed on that thread, innermost first.
//
// The cache: inside an autocast region, a float32 leaf parameter that
// requires grad is cast to bf16/fp16 once and the copy is reused. Changing
// the parameter in place within the same region (an optimizer step) leaves
// the cached copy stale until the outermost guard exits (or a guard that
// turned caching on inside a region without it) or clear_autocast_cache()
// runs. A copy cast under torch::NoGradGuard has no autograd history: reused
// by a training forward, it leaves its parameter without a gradient. So the
// Accelerator's region around the whole loop never caches (accelerator.h).
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <string>

#include "accelerate/common/arg.h"
#include "accelerate/common/mixed_precision.h"

namespace accelerate {

// Accelerate's AutocastKwargs.
struct AutocastOptions {
  // false: autocast is switched OFF inside the scope (an fp32 island).
  ACCELERATE_ARG(bool, enabled) = true;
  // Reuse casted copies of weights within the region (see above). The
  // Accelerator's region around the loop ignores it and never caches; its
  // autocast() scopes honour it, for the scope's lifetime.
  ACCELERATE_ARG(bool, cache_enabled) = true;
};

class AutocastGuard {
 public:
  // Does nothing (mixed precision "no").
  AutocastGuard() = default;
  // Autocast on `device` (kCPU or kCUDA) to `dtype` (kBFloat16 or kHalf) for
  // the guard's lifetime. Throws ConfigError for kHalf on the CPU (LibTorch
  // 1.13's CPU autocast has no fp16; use bf16) and for other dtypes.
  AutocastGuard(c10::DeviceType device, c10::ScalarType dtype, AutocastOptions options = {});
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

  bool active() const { return active_; }

 private:
  bool active_ = false;
  c10::DeviceType device_ = c10::kCPU;
  bool previous_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::kBFloat16;
  bool previous_cache_enabled_ = true;
  bool cache_enabled_ = true;
};

// Whether autocast is on for `device` on this thread, and to which dtype.
bool autocast_enabled(c10::DeviceType device);
c10::ScalarType autocast_dtype(c10::DeviceType device);

// Drops this thread's casted-weight cache (stale after in-place changes).
void clear_autocast_cache();

// kBF16 → kBFloat16, kFP16 → kHalf; ConfigError for kNo.
c10::ScalarType mixed_precision_dtype(MixedPrecision mixed_precision);

}  // namespace accelerate
