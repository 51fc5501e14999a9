// What every engine does alike unless it knows better.
#include "parallel/parallel_engine.h"

// clip_grad.h uses torch::Tensor without including its declaration.
#include <torch/types.h>

#include <torch/nn/utils/clip_grad.h>

#include "checkpoint/model_streaming.h"
#include "checkpoint/whole_state_items.h"

namespace accelerate {

ParallelEngine::~ParallelEngine() = default;

double ParallelEngine::clip_grad_norm(const std::vector<at::Tensor>& parameters, double max_norm,
                                      double norm_type) {
  // Gradients are averaged, so equal on every process: so is their norm.
  return torch::nn::utils::clip_grad_norm_(parameters, max_norm, norm_type);
}

void ParallelEngine::clip_grad_value(const std::vector<at::Tensor>& parameters, double clip_value) {
  torch::nn::utils::clip_grad_value_(parameters, clip_value);
}

GradientNormParts ParallelEngine::gradient_norm_parts(const std::vector<at::Tensor>& parameters,
                                                      double norm_type,
                                                      const IsTensorParallelPart& is_part) {
  // Averaged gradients: every process of the engine holds them whole.
  GradientNormParts parts(norm_type);
  for (const at::Tensor& parameter : parameters) {
    if (parameter.grad().defined()) parts.add(parameter.grad(), is_part(parameter));
  }
  return parts;
}

void ParallelEngine::scale_gradients(const std::vector<at::Tensor>& parameters, double factor) {
  at::NoGradGuard no_grad;
  for (const at::Tensor& parameter : parameters) {
    if (parameter.grad().defined()) parameter.grad().mul_(factor);
  }
}

std::unique_ptr<checkpoint::WeightGroups> ParallelEngine::weight_groups(
    const torch::nn::Module& module) {
  (void)module;
  return nullptr;
}

std::unique_ptr<checkpoint::CheckpointItem> ParallelEngine::model_item(torch::nn::Module& module,
                                                                       std::size_t index,
                                                                       NamedTensors weights,
                                                                       bool by_groups) {
  (void)by_groups;
  return checkpoint::whole_model_item(module, index, std::move(weights),
                                      [this, &module] { whole_weights_written(module); });
}

std::unique_ptr<checkpoint::CheckpointItem> ParallelEngine::optimizer_item(
    torch::optim::Optimizer& optimizer, std::size_t index,
    const std::vector<torch::nn::Module*>& models, const FindTensorParallelPart& find_part) {
  (void)find_part;  // inside load_state's guard whole state is whole
  return checkpoint::whole_optimizer_item(optimizer, index, models);
}

}  // namespace accelerate
