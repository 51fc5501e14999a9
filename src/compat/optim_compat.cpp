#include "compat/optim_compat.h"

#include <torch/optim/optimizer.h>

#include "accelerate_compat_config.h"

namespace accelerate::compat {
namespace {

auto state_key(const at::Tensor& param) {
#if ACCELERATE_COMPAT_OPTIM_STATE_POINTER_KEY
  return static_cast<void*>(param.unsafeGetTensorImpl());
#else
  return c10::guts::to_string(param.unsafeGetTensorImpl());
#endif
}

}  // namespace

const torch::optim::OptimizerParamState* param_state(const torch::optim::Optimizer& optimizer,
                                                     const at::Tensor& param) {
  const auto found = optimizer.state().find(state_key(param));
  return found == optimizer.state().end() ? nullptr : found->second.get();
}

std::unique_ptr<torch::optim::OptimizerParamState> take_param_state(
    torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  const auto found = optimizer.state().find(state_key(param));
  if (found == optimizer.state().end()) return nullptr;
  auto state = std::move(found->second);
  optimizer.state().erase(found);
  return state;
}

void set_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                     std::unique_ptr<torch::optim::OptimizerParamState> state) {
  optimizer.state()[state_key(param)] = std::move(state);
}

}  // namespace accelerate::compat
