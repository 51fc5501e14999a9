// GradScaler: dynamic loss scaling for fp16 training (PyTorch's
// torch.cuda.amp.GradScaler, with Accelerate's defaults), in C++.
//
// fp16 gradients of small losses underflow to zero; scaling the loss by S
// before backward keeps them representable, and the gradients are divided by
// S again (unscaled) before the optimizer uses them. If any gradient is inf or
// NaN the step is skipped and S shrinks (backoff); after growth_interval
// clean steps in a row S grows. Per step:
//
//   scaler.scale(loss).backward();
//   scaler.unscale_(optimizer);        // optional: before clipping
//   clip_grad_norm_(...);
//   bool stepped = scaler.step(optimizer);  // unscales if not done yet
//   scaler.update();
//
// The Accelerator does all of this for fp16 (backward(), clip_grad_norm_,
// accelerate::Optimizer::step()). CUDA tensors use LibTorch's fused kernels;
// other devices use the same arithmetic built from basic ops (1.13's fused
// kernels are CUDA-only), which is what CPU tests exercise.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <unordered_map>

#include "accelerate/common/arg.h"

namespace torch {
namespace optim {
class Optimizer;
}  // namespace optim
namespace serialize {
class InputArchive;
class OutputArchive;
}  // namespace serialize
}  // namespace torch

namespace accelerate {

// Accelerate's GradScalerKwargs (PyTorch's GradScaler arguments).
struct GradScalerOptions {
  ACCELERATE_ARG(double, init_scale) = 65536.0;
  ACCELERATE_ARG(double, growth_factor) = 2.0;
  ACCELERATE_ARG(double, backoff_factor) = 0.5;
  // Clean steps in a row before the scale grows.
  ACCELERATE_ARG(int64_t, growth_interval) = 2000;
  // false: every call passes through (scale 1, nothing skipped).
  ACCELERATE_ARG(bool, enabled) = true;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (the scale lives on the loss's device from the first call).
  at::Tensor scale(const at::Tensor& loss);

  // Divides `optimizer`'s gradients by the scale in place and records whether
  // any is inf/NaN. At most once per optimizer between update()s, and not
  // after step(): both throw Error. fp16 gradients are refused (Error): the
  // unscaled values would underflow — keep fp32 master parameters.
  void unscale_(torch::optim::Optimizer& optimizer);
  // Sharded training: each process unscales only its shard of the
  // gradients, so the processes' inf/NaN findings are combined (`combine`
  // all-reduces the 0/1 flag in place) before any step is taken or skipped.
  void combine_found_inf_with(std::function<void(at::Tensor&)> combine) {
    combine_found_inf_ = std::move(combine);
  }
  // Whether unscale_() already ran for `optimizer` since the last update().
  bool is_unscaled(const torch::optim::Optimizer& optimizer) const;

  // Unscales if needed, then steps `optimizer` unless a gradient was inf/NaN.
  // Returns whether it stepped. Once per optimizer between update()s.
  bool step(torch::optim::Optimizer& optimizer);
  // The same, with the optimizer's own step given as `do_step` (wrappers
  // whose step() override leads here use it to reach the base step).
  bool step(torch::optim::Optimizer& optimizer, const std::function<void()>& do_step);

  // Backs off (any skipped step since the last update) or counts toward
  // growth; then forgets the per-optimizer records. Throws Error if no
  // optimizer was unscaled or stepped since the last update.
  void update();

  // The current scale (init_scale before the first scale(); 1 if disabled).
  double get_scale() const;
  int64_t growth_tracker() const;
  bool is_enabled() const { return options_.enabled(); }
  const GradScalerOptions& options() const { return options_; }

  // scale, growth_tracker and the factors, as PyTorch's state_dict holds
  // them. A disabled scaler saves nothing and loads nothing; loading an
  // empty state (from a disabled scaler) into an enabled one throws.
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct OptimizerRecord {
    Stage stage = Stage::kReady;
    at::Tensor found_inf;  // float 0/1 on the scale's device
  };
  void ensure_scale_on(const c10::Device& device);

  GradScalerOptions options_;
  at::Tensor scale_;           // float32 scalar, lazily created
  at::Tensor growth_tracker_;  // int32 scalar beside it
  std::unordered_map<const torch::optim::Optimizer*, OptimizerRecord> records_;
  std::function<void(at::Tensor&)> combine_found_inf_;
};

}  // namespace accelerate
