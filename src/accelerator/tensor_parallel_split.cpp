#include "accelerator/tensor_parallel_split.h"

#include <algorithm>
#include <string>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "accelerate/common/errors.h"
#include "accelerate/nn/tensor_parallel_plan.h"
#include "checkpoint/optimizer_kinds.h"
#include "compat/optim_compat.h"

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
  for (const TensorParallelPart& part : tensor_parallel_parts(module)) {
    parts_.emplace(part.tensor.unsafeGetTensorImpl(), part);
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

void check_tensor_parallel_checkpoint(const std::vector<torch::optim::Optimizer*>& optimizers,
                                      const TensorParallel& tp, const std::string& what) {
  if (!tp.enabled()) return;
  const std::string at = what + " at tp_size " + std::to_string(tp.size());
  for (const torch::optim::Optimizer* optimizer : optimizers) {
    const checkpoint::Kind* kind = checkpoint::kind_of(*optimizer);
    if (kind == nullptr) {
      throw ConfigError(at +
                        " saves the optimizer state by the parameters' parts, which is built for "
                        "LibTorch's SGD, Adam, AdamW, Adagrad and RMSprop only");
    }
    for (const checkpoint::StateTensor& state : kind->tensors) {
      if (state.shape != nullptr) {
        throw ConfigError(at + ": the " + kind->name + " state '" + state.name +
                          "' is not shaped as its parameter and cannot be split");
      }
    }
  }
}

namespace {

// Every state tensor `optimizers` hold for `part`, with its slot.
template <typename Visit>
void for_each_state_of(const TensorParallelPart& part,
                       const std::vector<torch::optim::Optimizer*>& optimizers, Visit visit) {
  for (torch::optim::Optimizer* optimizer : optimizers) {
    std::unique_ptr<torch::optim::OptimizerParamState> state =
        compat::take_param_state(*optimizer, part.tensor);
    if (!state) continue;
    for (const checkpoint::StateTensor& slot : checkpoint::kind_of(*optimizer)->tensors) {
      at::Tensor& tensor = slot.slot(*state);
      if (tensor.defined() && tensor.dim() == part.tensor.dim()) visit(tensor);
    }
    compat::set_param_state(*optimizer, part.tensor, std::move(state));
  }
}

}  // namespace

ScopeGuard whole_tensor_parallel_checkpoint(const std::vector<torch::nn::Module*>& models,
                                            const std::vector<torch::optim::Optimizer*>& optimizers,
                                            ParallelEngine& engine, const TensorParallel& tp,
                                            const std::string& what, bool loading) {
  if (!tp.enabled()) return ScopeGuard(nullptr);
  check_tensor_parallel_checkpoint(optimizers, tp, what);
  // ZeRO-3 holds shards of the parts: every unit gathered first, until the
  // parts are back (and after a load the shards have taken them).
  std::shared_ptr<ScopeGuard> gathered;
  if (std::any_of(models.begin(), models.end(),
                  [&](const torch::nn::Module* model) { return engine.shards_weights(*model); }))
    gathered = std::make_shared<ScopeGuard>(engine.full_weights());
  // Each model's state before its weights are whole: the parts' layout is
  // read from the split layers.
  auto parts = std::make_shared<std::vector<TensorParallelPart>>();
  for (torch::nn::Module* model : models) {
    for (TensorParallelPart& part : tensor_parallel_parts(*model)) parts->push_back(part);
  }
  at::NoGradGuard no_grad;
  for (const TensorParallelPart& part : *parts) {
    for_each_state_of(part, optimizers,
                      [&part](at::Tensor& state) { state = gather_whole(state, part); });
  }
  auto weights = std::make_shared<std::vector<ScopeGuard>>();
  for (torch::nn::Module* model : models) weights->push_back(whole_tensor_parallel_weights(*model));
  return ScopeGuard([parts, weights, optimizers, models, &engine, loading, gathered]() mutable {
    weights->clear();  // the weights' parts back first
    // The engine's own copies (ZeRO's masters and shards) take the loaded parts.
    if (loading) {
      for (torch::nn::Module* model : models) engine.whole_weights_written(*model);
    }
    gathered.reset();
    at::NoGradGuard no_grad;
    for (const TensorParallelPart& part : *parts) {
      for_each_state_of(part, optimizers, [&](at::Tensor& state) {
        if (state.size(part.dim) == part.whole_length) state = part_of_whole(state, part);
      });
    }
  });
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
