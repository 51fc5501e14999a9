#include "accelerator/tensor_parallel_split.h"

#include <algorithm>
#include <string>

#include <torch/nn/module.h>

#include "accelerate/errors.h"
#include "accelerate/tensor_parallel_plan.h"

namespace accelerate {

void TensorParallelParts::split(torch::nn::Module& module, const TensorParallel& tp) {
  const int split_over = tensor_parallel_size_of(module);
  if (split_over > 1 && split_over != tp.size()) {
    // Data parallelism over the wrong processes would average different parts.
    throw ConfigError("tensor parallelism: the model (" + module.name() +
                      ") is split over tp_size " + std::to_string(split_over) +
                      " but the Accelerator's tp_size is " + std::to_string(tp.size()) +
                      " (ParallelismConfig::tp_size, --parallelism_config_tp_size)");
  }
  if (!tp.enabled()) return;
  if (split_over == 1) {
    auto* model = dynamic_cast<TensorParallelModel*>(&module);
    if (!model) {
      throw ConfigError("tp_size " + std::to_string(tp.size()) + ": the model (" + module.name() +
                        ") has no tensor-parallel plan of its own: split it with "
                        "accelerate::parallelize_module(model, plan, "
                        "accelerator.tensor_parallel()) before prepare");
    }
    model->parallelize(tp);
  }
  for (const at::Tensor& part : tensor_parallel_parts(module)) {
    if (parts_.insert(part.unsafeGetTensorImpl()).second) kept_.push_back(part);
  }
}

ScopeGuard whole_weights_of(const torch::nn::Module& model,
                            const std::vector<torch::nn::Module*>& prepared,
                            const TensorParallel& tp) {
  if (!tp.enabled()) return ScopeGuard(nullptr);
  const auto found = std::find(prepared.begin(), prepared.end(), &model);
  if (found == prepared.end()) {
    throw ConfigError("tp_size " + std::to_string(tp.size()) + ": the model (" + model.name() +
                      ") was not prepared by this Accelerator, so its parts cannot be gathered");
  }
  return whole_tensor_parallel_weights(**found);
}

double clip_grad_norm_over_tensor_parallel(ParallelEngine& engine,
                                           const std::vector<at::Tensor>& parameters,
                                           double max_norm, double norm_type,
                                           const TensorParallel& tp,
                                           const TensorParallelParts& parts) {
  GradientNormParts pieces = engine.gradient_norm_parts(
      parameters, norm_type, [&parts](const at::Tensor& p) { return parts.contains(p); });
  pieces.combine_parts(*tp.group());
  const double norm = pieces.norm();
  if (const auto factor = clip_coefficient(norm, max_norm)) {
    engine.scale_gradients(parameters, *factor);
  }
  return norm;
}

}  // namespace accelerate
