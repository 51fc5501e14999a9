// The checkpoint items of a model and an optimizer held whole on every
// process (one process, data parallelism, ZeRO stages 1-2's weights): the
// main process writes them; every process reads them back, also from what
// a ZeRO job saved per process (stage 3's model pieces, sharded optimizer
// state at any tensor-parallel size). What an engine hands out where it
// shards nothing (ParallelEngine::model_item / optimizer_item). Internal.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "accelerate/checkpoint/safetensors.h"
#include "checkpoint/checkpoint_items.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn
namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace accelerate::checkpoint {

// Model `index`: on save `weights` (its state dict, as the pre-hooks left
// it) in one file. `loaded`: called once a load has written the weights
// (an engine's own copies of them take the new values).
std::unique_ptr<CheckpointItem> whole_model_item(torch::nn::Module& model, std::size_t index,
                                                 NamedTensors weights,
                                                 std::function<void()> loaded);

// Optimizer `index`: one archive. `models`: the prepared models (state
// saved sharded finds its parameters through them; inside load_state's
// guard their tensor-parallel parts are whole, and so is their state).
std::unique_ptr<CheckpointItem> whole_optimizer_item(torch::optim::Optimizer& optimizer,
                                                     std::size_t index,
                                                     std::vector<torch::nn::Module*> models);

}  // namespace accelerate::checkpoint
