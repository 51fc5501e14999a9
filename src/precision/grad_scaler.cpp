#include "accelerate/precision/grad_scaler.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "accelerate/common/errors.h"
#include "checkpoint/checkpoint_archives.h"

namespace accelerate {
namespace {

// The gradients an optimizer would use, grouped by device: CUDA groups go to
// the fused kernel, the rest through the portable path.
using DeviceGroups = std::vector<std::pair<c10::Device, std::vector<at::Tensor>>>;

DeviceGroups gradients_by_device(torch::optim::Optimizer& optimizer) {
  DeviceGroups groups;
  for (auto& group : optimizer.param_groups()) {
    for (auto& parameter : group.params()) {
      const at::Tensor& grad = parameter.grad();
      if (!grad.defined()) continue;
      if (grad.scalar_type() == at::kHalf) {
        throw Error(
            "GradScaler: a parameter of shape " + c10::str(parameter.sizes()) +
            " has an fp16 gradient; unscaled fp16 gradients underflow. Keep parameters in fp32 "
            "(autocast computes in fp16 while the weights stay fp32)");
      }
      if (grad.is_sparse()) throw Error("GradScaler: sparse gradients are not supported");
      auto group = std::find_if(groups.begin(), groups.end(),
                                [&grad](const auto& g) { return g.first == grad.device(); });
      if (group == groups.end()) group = groups.insert(groups.end(), {grad.device(), {}});
      group->second.push_back(grad);
    }
  }
  return groups;
}

// What _amp_foreach_non_finite_check_and_unscale_ does, from basic ops:
// multiply every gradient by inv_scale, and set found_inf to 1 if any value
// is inf or NaN.
void unscale_portably(std::vector<at::Tensor>& grads, at::Tensor& found_inf,
                      const at::Tensor& inv_scale) {
  bool any_non_finite = false;
  for (auto& grad : grads) {
    if (!any_non_finite && !at::isfinite(grad).all().item<bool>()) any_non_finite = true;
    grad.mul_(inv_scale.to(grad.device()));
  }
  if (any_non_finite) found_inf.fill_(1.0);
}

// What _amp_update_scale_ does: back off after a non-finite step, grow after
// growth_interval clean ones (only if the grown scale is finite).
void update_scale_portably(at::Tensor& scale, at::Tensor& growth_tracker,
                           const at::Tensor& found_inf, const GradScalerOptions& options) {
  const float current = scale.item<float>();
  if (found_inf.item<float>() != 0.0f) {
    scale.fill_(static_cast<float>(current * options.backoff_factor()));
    growth_tracker.fill_(0);
    return;
  }
  const int64_t successful = growth_tracker.item<int32_t>() + 1;
  if (successful == options.growth_interval()) {
    const float grown = static_cast<float>(current * options.growth_factor());
    if (std::isfinite(grown)) scale.fill_(grown);
    growth_tracker.fill_(0);
  } else {
    growth_tracker.fill_(successful);
  }
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(std::move(options)) {
  if (!(options_.init_scale() > 0) || !(options_.growth_factor() > 1.0) ||
      !(options_.backoff_factor() > 0 && options_.backoff_factor() < 1.0) ||
      options_.growth_interval() < 1) {
    throw ConfigError(
        "GradScaler needs init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and "
        "growth_interval >= 1");
  }
}

void GradScaler::ensure_scale_on(const c10::Device& device) {
  if (scale_.defined()) return;
  scale_ =
      at::full({}, options_.init_scale(), at::TensorOptions().dtype(at::kFloat).device(device));
  growth_tracker_ = at::zeros({}, at::TensorOptions().dtype(at::kInt).device(device));
}

at::Tensor GradScaler::scale(const at::Tensor& loss) {
  if (!options_.enabled()) return loss;
  ensure_scale_on(loss.device());
  return loss * scale_.to(loss.device(), /*non_blocking=*/true);
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled()) return;
  if (!scale_.defined()) {
    throw Error("GradScaler: unscale_()/step() before any scale(): scale the loss before backward");
  }
  OptimizerRecord& record = records_[&optimizer];
  if (record.stage == Stage::kUnscaled) {
    throw Error(
        "GradScaler::unscale_() was already called for this optimizer since the last update()");
  }
  if (record.stage == Stage::kStepped) {
    throw Error(
        "GradScaler::unscale_() called after step() for this optimizer; call update() first");
  }
  c10::NoGradGuard no_grad;
  // As PyTorch: the reciprocal in double, then rounded to float once.
  const at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  record.found_inf = at::zeros({1}, scale_.options());
  for (auto& entry : gradients_by_device(optimizer)) {
    const c10::Device& device = entry.first;
    if (device.is_cuda()) {
      at::Tensor found_here = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device));
      at::_amp_foreach_non_finite_check_and_unscale_(entry.second, found_here,
                                                     inv_scale.to(device));
      record.found_inf.add_(found_here.to(record.found_inf.device()));
    } else {
      at::Tensor found_here = at::zeros({1}, at::kFloat);
      unscale_portably(entry.second, found_here, inv_scale.cpu());
      record.found_inf.add_(found_here.to(record.found_inf.device()));
    }
  }
  if (combine_found_inf_) combine_found_inf_(record.found_inf);
  record.stage = Stage::kUnscaled;
}

bool GradScaler::is_unscaled(const torch::optim::Optimizer& optimizer) const {
  auto it = records_.find(&optimizer);
  return it != records_.end() && it->second.stage == Stage::kUnscaled;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  return step(optimizer, [&optimizer] { optimizer.step(); });
}

bool GradScaler::step(torch::optim::Optimizer& optimizer, const std::function<void()>& do_step) {
  if (!options_.enabled()) {
    do_step();
    return true;
  }
  auto it = records_.find(&optimizer);
  if (it != records_.end() && it->second.stage == Stage::kStepped) {
    throw Error("GradScaler::step() was already called for this optimizer since the last update()");
  }
  if (it == records_.end() || it->second.stage == Stage::kReady) unscale_(optimizer);
  OptimizerRecord& record = records_[&optimizer];
  const bool skip = record.found_inf.item<float>() != 0.0f;
  if (!skip) do_step();
  record.stage = Stage::kStepped;
  return !skip;
}

void GradScaler::update() {
  if (!options_.enabled()) return;
  if (records_.empty()) {
    throw Error(
        "GradScaler::update(): no optimizer was unscaled or stepped since the last update()");
  }
  at::Tensor found_inf = at::zeros({1}, scale_.options());
  for (auto& entry : records_) found_inf.add_(entry.second.found_inf);
  if (scale_.is_cuda()) {
    at::_amp_update_scale_(scale_, growth_tracker_, found_inf, options_.growth_factor(),
                           options_.backoff_factor(), options_.growth_interval());
  } else {
    update_scale_portably(scale_, growth_tracker_, found_inf, options_);
  }
  records_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled()) return 1.0;
  return scale_.defined() ? scale_.item<float>() : options_.init_scale();
}

int64_t GradScaler::growth_tracker() const {
  return growth_tracker_.defined() ? growth_tracker_.item<int32_t>() : 0;
}

void GradScaler::save(torch::serialize::OutputArchive& archive) const {
  if (!options_.enabled()) return;  // PyTorch's state_dict is empty too
  archive.write("scale", c10::IValue(get_scale()));
  archive.write("growth_factor", c10::IValue(options_.growth_factor()));
  archive.write("backoff_factor", c10::IValue(options_.backoff_factor()));
  checkpoint::write_int(archive, "growth_interval", options_.growth_interval());
  checkpoint::write_int(archive, "_growth_tracker", growth_tracker());
}

void GradScaler::load(torch::serialize::InputArchive& archive) {
  if (!options_.enabled()) return;
  c10::IValue present;
  if (!archive.try_read("scale", present)) {
    throw Error("GradScaler::load: the state is empty (saved from a disabled GradScaler?)");
  }
  const double scale = checkpoint::read_double(archive, "scale");
  options_.growth_factor(checkpoint::read_double(archive, "growth_factor"));
  options_.backoff_factor(checkpoint::read_double(archive, "backoff_factor"));
  options_.growth_interval(checkpoint::read_int(archive, "growth_interval"));
  const int64_t tracker = checkpoint::read_int(archive, "_growth_tracker");
  const c10::Device device = scale_.defined() ? scale_.device() : c10::Device(c10::kCPU);
  scale_ = at::full({}, scale, at::TensorOptions().dtype(at::kFloat).device(device));
  growth_tracker_ = at::full({}, tracker, at::TensorOptions().dtype(at::kInt).device(device));
  records_.clear();
}

}  // namespace accelerate
