// What the ZeRO tests read back after training, in one place: each rank's
// result from threads-as-ranks, the whole weights, and how many parameter
// elements an optimizer keeps state for.
#pragma once

#include <functional>
#include <memory>
#include <unordered_set>
#include <vector>

#include <torch/torch.h>

#include "accelerate/accelerator/accelerator.h"
#include "compat/optim_compat.h"
#include "parallel/storage_release.h"
#include "support/thread_ranks.h"

namespace accelerate {
namespace testing {

// `body`'s result on each of `world` ranks (threads with real collectives).
template <class Result>
std::vector<Result> on_each_rank(int world,
                                 const std::function<Result(std::shared_ptr<Communicator>)>& body) {
  std::vector<Result> results(world);
  run_rank_communicators(world, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    results[rank] = body(std::move(comm));
  });
  return results;
}

// The model's whole weights, in get_state_dict's order (every rank calls it).
inline std::vector<at::Tensor> whole_weights(Accelerator& accelerator,
                                             const torch::nn::Module& model) {
  std::vector<at::Tensor> weights;
  for (const auto& entry : accelerator.get_state_dict(model)) weights.push_back(entry.second);
  return weights;
}

// `epochs` passes over `loader` of an MSE regression of `model`, in
// accumulate() scopes, clipping the gradient norm at `clip` (when > 0) on
// the steps that sync.
template <class Model, class Optimizer, class Loader>
void train_epochs(Accelerator& accelerator, Model& model, Optimizer& optimizer, Loader& loader,
                  double clip, int epochs = 2) {
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (auto& batch : loader) {
      auto scope = accelerator.accumulate();
      auto loss = torch::mse_loss(model->forward(batch.data).to(at::kFloat), batch.target);
      accelerator.backward(loss);
      if (clip > 0 && accelerator.sync_gradients()) {
        accelerator.clip_grad_norm_(model->parameters(), clip);
      }
      optimizer.step();
      optimizer.zero_grad();
    }
  }
}

// Whether `optimizer` steps memory of `model`'s own parameters (ZeRO steps
// the shards in place); with CPU offloading it steps host copies instead.
inline bool optimizer_steps_model_memory(torch::optim::Optimizer& optimizer,
                                         torch::nn::Module& model) {
  std::unordered_set<const void*> model_memory;
  for (const auto& p : model.parameters()) {
    if (p.storage().nbytes() > 0) model_memory.insert(p.storage().data());
  }
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (model_memory.count(p.storage().data()) > 0) return true;
    }
  }
  return false;
}

// Whether every one of `parameters` is without memory (a freed stage-3 unit).
inline bool all_released(const std::vector<at::Tensor>& parameters) {
  for (const auto& p : parameters) {
    if (!detail::storage_released(p)) return false;
  }
  return true;
}

// The elements of the parameters `optimizer` holds state for.
inline int64_t optimizer_state_elements(torch::optim::Optimizer& optimizer) {
  int64_t elements = 0;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (compat::param_state(optimizer, p) != nullptr) elements += p.numel();
    }
  }
  return elements;
}

}  // namespace testing
}  // namespace accelerate
