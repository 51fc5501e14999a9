// Adafactor (accelerate/schedule/adafactor.h). Each operation follows transformers'
// optimization.Adafactor in the same order and precision, so that the
// updates agree with it to float rounding (tests/trainer).
#include "accelerate/schedule/adafactor.h"

#include <torch/optim/serialize.h>
#include <torch/serialize/archive.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>

#include "accelerate/common/errors.h"
#include "compat/optim_compat.h"

namespace accelerate {

namespace {

double rms_of(const at::Tensor& tensor) {
  return (tensor.norm(2) / std::sqrt(static_cast<double>(tensor.numel()))).item<double>();
}

bool is_half(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}

}  // namespace

void AdafactorOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps1);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps2);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(clip_threshold);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(decay_rate);
  if (beta1()) archive.write("beta1", c10::IValue(*beta1()));
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(scale_parameter);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(relative_step);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(warmup_init);
}

void AdafactorOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps1);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps2);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, clip_threshold);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, decay_rate);
  c10::IValue beta1_value;
  beta1(archive.try_read("beta1", beta1_value) ? std::optional<double>(beta1_value.toDouble())
                                               : std::nullopt);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, scale_parameter);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, relative_step);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, warmup_init);
}

void AdafactorParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg_sq_row);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg_sq_col);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg_sq);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(rms);
}

void AdafactorParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, step);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(at::Tensor, exp_avg);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(at::Tensor, exp_avg_sq_row);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(at::Tensor, exp_avg_sq_col);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(at::Tensor, exp_avg_sq);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, rms);
}

Adafactor::Adafactor(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                     AdafactorOptions defaults)
    : torch::optim::Optimizer(std::move(param_groups),
                              std::make_unique<AdafactorOptions>(defaults)) {
  if (defaults.relative_step() && defaults.lr() != 0.0) {
    throw ConfigError("Adafactor: a learning rate with relative_step; turn relative_step off");
  }
  if (defaults.warmup_init() && !defaults.relative_step()) {
    throw ConfigError("Adafactor: warmup_init needs relative_step");
  }
}

at::Tensor Adafactor::step(LossClosure closure) {
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  torch::NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    const auto& options = static_cast<const AdafactorOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      at::Tensor grad = p.grad();
      if (is_half(grad)) grad = grad.to(at::kFloat);
      TORCH_CHECK(!grad.is_sparse(), "Adafactor does not support sparse gradients");
      const bool factored = grad.dim() >= 2;
      const bool first_moment = options.beta1().has_value();

      auto owned = compat::take_param_state(*this, p);
      if (!owned) {
        auto fresh = std::make_unique<AdafactorParamState>();
        if (first_moment) fresh->exp_avg(at::zeros_like(grad));
        if (factored) {
          auto row_shape = grad.sizes().vec(), col_shape = grad.sizes().vec();
          row_shape.pop_back();
          col_shape.erase(col_shape.end() - 2);
          fresh->exp_avg_sq_row(at::zeros(row_shape, grad.options()));
          fresh->exp_avg_sq_col(at::zeros(col_shape, grad.options()));
        } else {
          fresh->exp_avg_sq(at::zeros_like(grad));
        }
        owned = std::move(fresh);
      }
      auto& state = static_cast<AdafactorParamState&>(*owned);
      // A state restored from elsewhere follows the gradient's dtype and device.
      const auto follow = [&](const at::Tensor& t) { return t.defined() ? t.to(grad) : t; };
      state.exp_avg(follow(state.exp_avg()));
      state.exp_avg_sq_row(follow(state.exp_avg_sq_row()));
      state.exp_avg_sq_col(follow(state.exp_avg_sq_col()));
      state.exp_avg_sq(follow(state.exp_avg_sq()));

      at::Tensor p_fp32 = is_half(p) ? p.to(at::kFloat) : p;
      state.step(state.step() + 1);
      state.rms(rms_of(p_fp32));
      double lr = options.lr();
      if (options.relative_step()) {
        const double step = static_cast<double>(state.step());
        const double min_step = options.warmup_init() ? 1e-6 * step : 1e-2;
        lr = std::min(min_step, 1.0 / std::sqrt(step));
      }
      if (options.scale_parameter()) lr *= std::max(options.eps2(), state.rms());
      const double beta2t = 1.0 - std::pow(static_cast<double>(state.step()), options.decay_rate());
      at::Tensor update = grad.pow(2) + options.eps1();
      if (factored) {
        state.exp_avg_sq_row().mul_(beta2t).add_(update.mean(-1), 1.0 - beta2t);
        state.exp_avg_sq_col().mul_(beta2t).add_(update.mean(-2), 1.0 - beta2t);
        const at::Tensor& row = state.exp_avg_sq_row();
        const at::Tensor r_factor = (row / row.mean(-1, /*keepdim=*/true)).rsqrt_().unsqueeze(-1);
        const at::Tensor c_factor = state.exp_avg_sq_col().unsqueeze(-2).rsqrt();
        update = at::mul(r_factor, c_factor);
        update.mul_(grad);
      } else {
        state.exp_avg_sq().mul_(beta2t).add_(update, 1.0 - beta2t);
        update = state.exp_avg_sq().rsqrt().mul_(grad);
      }
      const at::Tensor update_rms = update.norm(2) / std::sqrt(static_cast<double>(update.numel()));
      update.div_((update_rms / options.clip_threshold()).clamp_(1.0));
      update.mul_(lr);
      if (first_moment) {
        state.exp_avg().mul_(*options.beta1()).add_(update, 1.0 - *options.beta1());
        update = state.exp_avg();
      }
      if (options.weight_decay() != 0) p_fp32.add_(p_fp32, -options.weight_decay() * lr);
      p_fp32.add_(-update);
      if (is_half(p)) p.copy_(p_fp32);
      compat::set_param_state(*this, p, std::move(owned));
    }
  }
  return loss;
}

void Adafactor::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<AdafactorParamState, AdafactorOptions>(archive, *this);
}

void Adafactor::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<AdafactorParamState, AdafactorOptions>(archive, *this);
}

}  // namespace accelerate
