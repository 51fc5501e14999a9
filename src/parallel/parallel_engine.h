// ParallelEngine: how the Accelerator's prepared models train across
// processes. One engine per kind of parallelism, chosen once when the
// Accelerator is built (src/accelerator/engine_choice.h):
//
//   DataParallelEngine  every process holds the whole model and optimizer;
//                       a GradientReducer per model averages the gradients
//                       (src/parallel/data_parallel_engine.h)
//   ShardedEngine       ZeRO stages 0-3 with offload, set up from DeepSpeed
//                       or FSDP settings (src/sharding/sharded_engine.h)
//
// The Accelerator asks every engine the same questions and never which one
// it has, as Marian's SyncGraphGroup talks to an ICommunicator, and as c10d
// keeps DDP's Reducer apart from FSDP. Each engine owns what it prepares.
// Internal.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/common/distributed_type.h"
#include "accelerate/common/mixed_precision.h"
#include "accelerate/common/scope_guard.h"
#include "accelerate/memory/empty_weights.h"
#include "parallel/gradient_norm.h"
#include "parallel/tensor_parallel_lookup.h"

namespace torch {
namespace nn {
class Module;
}  // namespace nn
namespace optim {
class Optimizer;
}  // namespace optim
}  // namespace torch

namespace accelerate {

class DummyOptim;
class DummyScheduler;
class GradientReducer;
class PreparedOptimizerBase;
namespace checkpoint {
class CheckpointItem;
class WeightGroups;
}  // namespace checkpoint

// What the program prepared, as an engine checks its settings against it
// once a prepare() call ends (a DeepSpeed file's "auto" entries).
struct PreparedProgram {
  int world_size = 1;
  std::optional<std::int64_t> micro_batch_size;  // the smallest prepared loader's, per process
  int gradient_accumulation_steps = 1;
  MixedPrecision mixed_precision = MixedPrecision::kNo;
  bool split_batches = false;
  bool has_optimizer = false;  // any optimizer prepared so far
};

class ParallelEngine {
 public:
  virtual ~ParallelEngine();

  // Accelerate's name for what this engine does in this job.
  virtual DistributedType distributed_type() const = 0;

  // ---- prepare ----------------------------------------------------------------
  // Accelerator::zero3_init: a guard under which modules are built without
  // weights (on the processes that receive them); a guard that does nothing
  // where the engine fills no weights itself.
  virtual EmptyWeightsGuard zero3_init() { return EmptyWeightsGuard(false); }
  // Takes `module` into training across the job: moved to `placement` (when
  // set) and made equal on every process. Once per module; collective.
  virtual void prepare_model(torch::nn::Module& module,
                             const std::optional<c10::Device>& placement) = 0;
  // A DummyOptim: builds the optimizer its settings describe in its place,
  // or ConfigError where they describe none.
  virtual void build_optimizer(DummyOptim& optimizer) = 0;
  virtual void prepare_optimizer(PreparedOptimizerBase& optimizer) = 0;
  // A torch optimizer without accelerate::Optimizer: ConfigError where the
  // engine must step it itself.
  virtual void check_plain_optimizer() const {}
  // A DummyScheduler, once its prepare() call ends (its DummyOptim may come
  // after it in the call): as build_optimizer.
  virtual void build_schedule(DummyScheduler& scheduler, const PreparedProgram& program) = 0;
  // The end of every prepare() call.
  virtual void finish_prepare(const PreparedProgram& program) { (void)program; }

  // ---- The step -----------------------------------------------------------------
  // Whether the next backward passes synchronise gradients (accumulation, no_sync).
  virtual void set_sync(bool sync) = 0;
  // Around Accelerator::backward: `loss` is what backward starts from.
  virtual void before_backward(const at::Tensor& loss) = 0;
  virtual void after_backward() = 0;
  // The norm every optimizer step clips the gradients to (DeepSpeed's
  // gradient_clipping); nullopt: the program clips, if it wants to.
  virtual std::optional<double> gradient_clipping() const { return std::nullopt; }
  // Before the loss scaler unscales: the gradients it must find are bound.
  virtual void before_unscale() {}
  // clip_grad_norm_ / clip_grad_value_ over `parameters`' gradients wherever
  // this engine keeps them; the norm is the same on every process.
  virtual double clip_grad_norm(const std::vector<at::Tensor>& parameters, double max_norm,
                                double norm_type);
  virtual void clip_grad_value(const std::vector<at::Tensor>& parameters, double clip_value);
  // For a norm across more of the mesh than the engine spans (tensor
  // parallelism): the pieces of the norm of `parameters`' gradients wherever
  // this engine keeps them, combined over the processes it spreads them
  // across, tensor-parallel parts apart; then scaling those gradients by
  // `factor`.
  virtual GradientNormParts gradient_norm_parts(const std::vector<at::Tensor>& parameters,
                                                double norm_type,
                                                const IsTensorParallelPart& is_part);
  virtual void scale_gradients(const std::vector<at::Tensor>& parameters, double factor);
  // One per prepared model in a job of several processes (statistics, tests).
  virtual std::vector<GradientReducer*> reducers() const = 0;

  // ---- Checkpoints and saved models --------------------------------------------
  // Where this process's shards of weights and optimizer state sit among
  // the processes sharing them, for checkpoints: by default the job's rank
  // and size, every process writing its own.
  struct ShardPlace {
    int rank = 0;
    int world_size = 1;
    bool writes = true;
  };
  virtual ShardPlace shard_place(int job_rank, int job_world_size) const {
    return {job_rank, job_world_size, true};
  }
  // Every prepared model's whole weights until the guard goes (collective).
  virtual ScopeGuard full_weights() { return ScopeGuard(nullptr); }
  // Until the guard goes, every prepared model's whole weights (where a
  // process holds them: stages 1-2, stage 3's root and gathered units) are
  // its exact master weights, not the rounded copies low-precision gathers
  // leave (collective; nothing where no gather rounds). Saving runs in it.
  virtual ScopeGuard exact_weights() { return ScopeGuard(nullptr); }
  // After a checkpoint wrote `module`'s whole weights (where every process
  // holds them): the engine's own copies of them take the new values.
  virtual void whole_weights_written(const torch::nn::Module& module) { (void)module; }
  // `module`'s weights in groups that can be gathered one at a time, or
  // null where the weights are whole on every process.
  virtual std::unique_ptr<checkpoint::WeightGroups> weight_groups(const torch::nn::Module& module);
  // Whether `module`'s weights are shards on every process (ZeRO stage 3),
  // so that no process holds its tensor-parallel parts whole to save.
  virtual bool shards_weights(const torch::nn::Module& module) const {
    (void)module;
    return false;
  }
  // save_state / load_state: the checkpoint items of prepared model `index`
  // and optimizer `index`, written and read wherever this engine keeps
  // them, so that the facade never asks how. `weights`: the model's state
  // dict as the pre-hooks left it; `by_groups`: written group by group
  // where the weights are sharded (false: gathered whole before). `models`:
  // the prepared models; `find_part`: where their tensor-parallel parts lie
  // (null: nothing split). By default whole on every process: the main
  // process writes one file (checkpoint/whole_state_items.h).
  virtual std::unique_ptr<checkpoint::CheckpointItem> model_item(torch::nn::Module& module,
                                                                 std::size_t index,
                                                                 NamedTensors weights,
                                                                 bool by_groups);
  virtual std::unique_ptr<checkpoint::CheckpointItem> optimizer_item(
      torch::optim::Optimizer& optimizer, std::size_t index,
      const std::vector<torch::nn::Module*>& models, const FindTensorParallelPart& find_part);
  // The dtype of the floating-point weights save_model writes and
  // get_state_dict returns, where it is not the training dtype.
  virtual std::optional<at::ScalarType> saved_weights_dtype() const { return std::nullopt; }
};

}  // namespace accelerate
