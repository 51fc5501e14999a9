// ZeRO stage 3 for one prepared model (docs/sharding.md, "Stage 3"): each
// unit's parameters live in flat buffers (ModelShards at stage 3, one set of
// gradient buckets per unit) that hold memory only while the unit needs
// them; every process keeps its shard in a tensor of its own.
//
// A unit's life in one training step, all driven from the model's own
// accelerate::unit_forward / checkpoint_activations call (unit_forward.h):
//   forward   gather the unit's buffers (all-gather of the shards; the next
//             unit's gather starts now, to overlap this unit's compute),
//             run the unit, hook its output, free the buffers
//   backward  the output's hook gathers them again (and starts the previous
//             unit's gather) before the unit's
//             backward reads the weights autograd saved (they alias the same
//             storage, src/parallel/storage_release.h); autograd adds the
//             unit's gradients straight into its reduce-scatter buffers
//             (GradientReducer::begin_bucket_gradients), which the reducer
//             reduce-scatters as they complete (stage 2's path); once
//             every parameter of the unit has its gradient,
//             the buffers are freed again
//   step      the optimizer updates the shards; the buffers stay free until
//             the unit next runs (ModelShards::gather_parameters skips them)
// A unit that never ran through that call keeps its buffers and is gathered
// after every step, as at stage 2, so a model that does not call it still
// trains correctly (without the memory saving).
//
// Every process must run the same units in the same order (the gathers are
// collectives), and backward runs on the thread that called it (CPU jobs;
// CUDA's autograd device threads are not handled yet). Internal.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "checkpoint/model_streaming.h"
#include "sharding/zero_optimizer.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace accelerate::sharding {

// Which unit each parameter of `root` (root.parameters() order) belongs to,
// or -1: outside every unit, or shared between a unit and anything else
// (tied weights stay whole on every process, as stage 2 keeps them).
std::vector<int> parameter_units(torch::nn::Module& root,
                                 const std::vector<torch::nn::Module*>& units);

// The ModelShards that gathers the unit module `unit` of a prepared stage-3
// model, or null for a module that is no such unit (or whose Accelerator is
// gone): what tests and diagnostics read its gather counts from.
ModelShards* unit_shards(const torch::nn::Module& unit);

class ParameterUnits {
 public:
  // `units`: the model's unit modules; `unit_of`: parameter_units' answer,
  // which `shards` was built with. Marks each unit module so that
  // unit_forward finds it (a child module named kHandleName).
  // Prefetch: start the next unit's gather while one runs (`prefetch_forward`:
  // the next in forward, `prefetch_backward`: the previous in backward, in
  // the last forward's order), so at most two units are whole at a time;
  // without it, one.
  // `start_released`: every unit counts as running through unit_forward
  // from the start, its weights freed until it first runs (zero3_init).
  ParameterUnits(std::shared_ptr<ModelShards> shards, const std::vector<torch::nn::Module*>& units,
                 const std::vector<int>& unit_of, bool reshard_after_forward,
                 bool prefetch_forward = true, bool prefetch_backward = true,
                 bool start_released = false);
  // Removes the gradient hooks, and the marks of units whose weights are
  // whole; a freed unit stays marked, and running it then throws Error
  // (gathering it would be a collective). Not during a backward pass.
  ~ParameterUnits();
  ParameterUnits(const ParameterUnits&) = delete;
  ParameterUnits& operator=(const ParameterUnits&) = delete;

  static constexpr const char* kHandleName = "accelerate_zero3_unit";

  // After each backward pass (Accelerator::backward): frees what a unit
  // whose gradients did not all arrive still holds, and rearms the hooks.
  void after_backward();
  // Full weights for everything that reads the whole model (save_model,
  // state dicts): gathers every free unit; release_all frees the units that
  // run through unit_forward again. Every process calls both.
  void gather_all();
  void release_all();
  // The units as the parts a save writes one at a time (save_model_by_groups),
  // so that no process holds the whole model: each unit's own parameters.
  std::unique_ptr<checkpoint::WeightGroups> weight_groups();

  struct State;  // shared with the hooks, which may outlive a step

 private:
  std::shared_ptr<State> state_;
};

}  // namespace accelerate::sharding
