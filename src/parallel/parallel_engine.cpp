// What every engine does alike unless it knows better.
#include "parallel/parallel_engine.h"

#include <torch/nn/utils/clip_grad.h>

#include "checkpoint/model_streaming.h"

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

std::unique_ptr<checkpoint::WeightGroups> ParallelEngine::weight_groups(
    const torch::nn::Module& module) {
  (void)module;
  return nullptr;
}

}  // namespace accelerate
