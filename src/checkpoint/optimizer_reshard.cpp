#include "checkpoint/optimizer_reshard.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/optim/optimizer.h>

#include <string>

#include "accelerate/common/errors.h"
#include "checkpoint/optimizer_kinds.h"
#include "compat/optim_compat.h"

namespace accelerate::checkpoint {

std::unique_ptr<torch::optim::Optimizer> make_optimizer_like(
    const torch::optim::Optimizer& like,
    const std::vector<std::vector<at::Tensor>>& params_by_group) {
  const Kind* kind = kind_of(like);
  if (kind == nullptr) {
    throw Error(
        "resharding optimizer state needs a built-in optimizer (SGD, Adam, AdamW, Adagrad, "
        "RMSprop, Adafactor)");
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (std::size_t g = 0; g < params_by_group.size(); ++g) {
    groups.emplace_back(params_by_group[g], like.param_groups().at(g).options().clone());
  }
  return kind->make_optimizer(std::move(groups));
}

void copy_state_slice(const torch::optim::Optimizer& from, const at::Tensor& from_param,
                      int64_t from_offset, torch::optim::Optimizer& to, const at::Tensor& to_param,
                      int64_t to_offset, int64_t count) {
  const torch::optim::OptimizerParamState* source = compat::param_state(from, from_param);
  if (source == nullptr || count == 0) return;
  const Kind* kind = kind_of(to);
  if (kind == nullptr || !kind->holds(*source)) {
    throw Error("copy_state_slice: optimizers of different or unknown types");
  }
  // Adafactor keeps a matrix's second moment as a row and a column
  // average, which have no slice per element of the parameter.
  for (const StateTensor& field : kind->tensors) {
    const std::string name = field.name;
    if ((name == "exp_avg_sq_row" || name == "exp_avg_sq_col") &&
        field.slot(const_cast<torch::optim::OptimizerParamState&>(*source)).defined()) {
      throw Error(std::string(kind->name) +
                  ": the factored second moment of a matrix cannot be resharded");
    }
  }
  c10::NoGradGuard no_grad;
  auto& readable = const_cast<torch::optim::OptimizerParamState&>(*source);
  if (compat::param_state(to, to_param) == nullptr) {
    auto state = source->clone();  // non-tensor fields; its tensors are replaced below
    for (const StateTensor& field : kind->tensors) {
      at::Tensor& tensor = field.slot(*state);
      // The source's dtype, on the target parameter's device (an offloaded
      // optimizer's parameters are in host memory whatever the saved state's were).
      if (tensor.defined()) {
        tensor =
            at::zeros(to_param.sizes(), field.slot(readable).options().device(to_param.device()));
      }
    }
    compat::set_param_state(to, to_param, std::move(state));
  }
  auto& target = const_cast<torch::optim::OptimizerParamState&>(*compat::param_state(to, to_param));
  for (const StateTensor& field : kind->tensors) {
    const at::Tensor& in = field.slot(readable);
    at::Tensor& out = field.slot(target);
    if (!in.defined() || !out.defined()) continue;
    out.view({-1})
        .narrow(0, to_offset, count)
        .copy_(in.reshape({-1}).narrow(0, from_offset, count));
  }
}

void copy_group_options(const torch::optim::Optimizer& from, torch::optim::Optimizer& to) {
  for (std::size_t g = 0; g < to.param_groups().size(); ++g) {
    to.param_groups()[g].set_options(from.param_groups().at(g).options().clone());
  }
}

}  // namespace accelerate::checkpoint
