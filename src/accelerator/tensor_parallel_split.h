// What Accelerator::prepare does with a model under tensor parallelism, and
// the gradient clipping that spans the tensor-parallel groups. Internal.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>

#include "accelerate/common/scope_guard.h"
#include "accelerate/nn/tensor_parallel.h"
#include "parallel/parallel_engine.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn
namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace accelerate {

// The parts of the models prepared so far that are split over the job's
// tensor-parallel group.
class TensorParallelParts {
 public:
  // Splits `module` over `tp` by its own plan (a TensorParallelModel), or
  // takes it as the program split it (parallelize_module, over a group of
  // the same size), and remembers its parts. ConfigError (one line) for a
  // model split over a group of another size (tp 1 included), or that
  // cannot be split: no plan of its own and no split layer.
  void split(torch::nn::Module& module, const TensorParallel& tp);
  bool contains(const at::Tensor& parameter) const {
    return parts_.count(parameter.unsafeGetTensorImpl()) > 0;
  }
  // Where `parameter`'s part lies in its whole, or null where it is whole.
  const TensorParallelPart* find(const at::Tensor& parameter) const {
    auto it = parts_.find(parameter.unsafeGetTensorImpl());
    return it == parts_.end() ? nullptr : &it->second;
  }

 private:
  std::unordered_map<const c10::TensorImpl*, TensorParallelPart> parts_;  // holds the tensors
};

// whole_tensor_parallel_weights of `model`, one of the `prepared` models
// (collective in each tensor-parallel group); nothing without tensor
// parallelism. ConfigError (one line) for a split model not prepared.
ScopeGuard whole_weights_of(const torch::nn::Module& model,
                            const std::vector<torch::nn::Module*>& prepared,
                            const TensorParallel& tp);

// Until the guard goes, every prepared model's split weights and every
// whole optimizer's state of them are whole, gathered from the
// tensor-parallel group (collective); when it goes, each takes back its part
// of what they then are (a load's values included). ZeRO's optimizer shards
// stay as they are: each tp rank saves its own (sharded_state_items.h). For
// `what` (save_state, load_state): ConfigError (one line, on every process
// alike) where that is not built: an optimizer other than LibTorch's
// built-in ones, or a state tensor not shaped as its parameter. Nothing without tensor parallelism.
// check_tensor_parallel_checkpoint: those refusals alone.
void check_tensor_parallel_checkpoint(const std::vector<torch::optim::Optimizer*>& optimizers,
                                      const TensorParallel& tp, const std::string& what);
// `loading`: the guard's end tells the engine the weights were written
// (ParallelEngine::whole_weights_written). ZeRO stage 3: every unit is
// gathered for the guard's time (every process holds the whole model).
ScopeGuard whole_tensor_parallel_checkpoint(const std::vector<torch::nn::Module*>& models,
                                            const std::vector<torch::optim::Optimizer*>& optimizers,
                                            ParallelEngine& engine, const TensorParallel& tp,
                                            const std::string& what, bool loading);

// clip_grad_norm_ over `engine`'s gradients of `parameters` with
// tensor-parallel groups of tp.size() > 1: the global norm over the whole
// mesh, each part's contribution summed over the group and each whole
// parameter counted once; the same on every process. Returns the norm.
double clip_grad_norm_over_tensor_parallel(ParallelEngine& engine,
                                           const std::vector<at::Tensor>& parameters,
                                           double max_norm, double norm_type,
                                           const TensorParallel& tp,
                                           const TensorParallelParts& parts);

}  // namespace accelerate
