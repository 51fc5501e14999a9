// Adafactor (Shazeer & Stern, 2018) as transformers' optimization.Adafactor
// has it, for LibTorch: the second moment of a matrix's gradient kept as a
// row and a column average (factored; O(rows + columns) memory instead of
// O(rows * columns)), updates clipped to an RMS of clip_threshold, an
// optional first moment (beta1), and the optional relative step size and
// parameter scaling. Defaults are transformers' own (relative_step and
// scale_parameter on, no lr); the Trainer's optim "adafactor" turns both off
// and sets lr to learning_rate, as transformers' Trainer does:
//
//   accelerate::Optimizer<accelerate::Adafactor> optimizer(
//       model->parameters(), accelerate::AdafactorOptions(1e-3)
//                                .relative_step(false)
//                                .scale_parameter(false));
//
// Checkpoints (save_state) keep its state like the built-in optimizers'.
#pragma once

#include <torch/arg.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace accelerate {

struct AdafactorOptions : public torch::optim::OptimizerCloneableOptions<AdafactorOptions> {
  explicit AdafactorOptions(double lr = 0.0) : lr_(lr) {}
  // The external rate; ignored (and must be 0) with relative_step.
  TORCH_ARG(double, lr) = 0.0;
  // Added to the squared gradient, and the floor of the parameter scale.
  TORCH_ARG(double, eps1) = 1e-30;
  TORCH_ARG(double, eps2) = 1e-3;
  // The largest RMS of an update before it is scaled down.
  TORCH_ARG(double, clip_threshold) = 1.0;
  // The second moment's decay: beta2 at step t is 1 - t^decay_rate.
  TORCH_ARG(double, decay_rate) = -0.8;
  // A first moment with this coefficient; none when unset.
  TORCH_ARG(std::optional<double>, beta1) = std::nullopt;
  TORCH_ARG(double, weight_decay) = 0.0;
  // Multiply the step by the parameter's RMS (at least eps2).
  TORCH_ARG(bool, scale_parameter) = true;
  // A step size of min(1e-2, 1/sqrt(t)) (warmup_init: min(1e-6 t, 1/sqrt(t))).
  TORCH_ARG(bool, relative_step) = true;
  TORCH_ARG(bool, warmup_init) = false;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct AdafactorParamState
    : public torch::optim::OptimizerCloneableParamState<AdafactorParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(at::Tensor, exp_avg);         // with beta1
  TORCH_ARG(at::Tensor, exp_avg_sq_row);  // factored (2 or more dimensions)
  TORCH_ARG(at::Tensor, exp_avg_sq_col);
  TORCH_ARG(at::Tensor, exp_avg_sq);  // not factored
  TORCH_ARG(double, rms) = 0.0;       // the parameter's RMS at the last step

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
};

class Adafactor : public torch::optim::Optimizer {
 public:
  // Throws accelerate::ConfigError for lr with relative_step, or
  // warmup_init without relative_step (transformers' ValueErrors).
  explicit Adafactor(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                     AdafactorOptions defaults = AdafactorOptions());
  explicit Adafactor(std::vector<at::Tensor> params, AdafactorOptions defaults = AdafactorOptions())
      : Adafactor({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults)) {}

  at::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
};

}  // namespace accelerate
