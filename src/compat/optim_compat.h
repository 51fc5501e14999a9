// Optimizer::state() is keyed by the parameter's TensorImpl pointer: as a
// string in LibTorch 1.13, as void* since 2.1. These look entries up by the
// parameter itself.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

namespace torch::optim {
class Optimizer;
class OptimizerParamState;
}  // namespace torch::optim

namespace accelerate::compat {

// The optimizer's state for `param`, or null when it has none.
const torch::optim::OptimizerParamState* param_state(const torch::optim::Optimizer& optimizer,
                                                     const at::Tensor& param);
// Removes the state for `param` and returns it (null when it had none).
std::unique_ptr<torch::optim::OptimizerParamState> take_param_state(
    torch::optim::Optimizer& optimizer, const at::Tensor& param);
// Replaces (or creates) the state for `param`.
void set_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                     std::unique_ptr<torch::optim::OptimizerParamState> state);

}  // namespace accelerate::compat
