// The checkpoint items (checkpoint/checkpoint_items.h) of what an
// Accelerator prepared: each model's weights and each optimizer's state,
// whole or in the pieces its ParallelEngine shards them into, and every
// process's random states and loader positions. The facade's other items
// (schedulers, the loss scaler, registered objects) are plain archives.
// Internal.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "accelerate/data_loader.h"
#include "accelerate/safetensors.h"
#include "checkpoint/checkpoint_items.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn
namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace accelerate {

class ParallelEngine;
class TensorParallelParts;

// Model `index`: on save, `weights` (its state dict, as the pre-hooks left
// it), written whole by the main process, group by group where the engine
// shards the weights (`by_groups`; false: they were gathered whole), or as
// every process's pieces where the engine saves pieces. On load, whole or
// from pieces, into the shards where the engine keeps them.
std::unique_ptr<checkpoint::CheckpointItem> model_item(torch::nn::Module& model, std::size_t index,
                                                       ParallelEngine& engine, NamedTensors weights,
                                                       bool by_groups);

// Optimizer `index`: whole (main process) or each process's shard (at
// tensor parallelism: each tp rank's shards of its parts), and loaded
// whole, into this job's shards, resharded from another number of
// processes, or assembled from another tp's parts. `models`: the prepared
// models (a sharded state loaded whole finds its parameters through them);
// `parts`: the tensor-parallel parts among their parameters (null: none).
std::unique_ptr<checkpoint::CheckpointItem> optimizer_item(torch::optim::Optimizer& optimizer,
                                                           std::size_t index,
                                                           ParallelEngine& engine,
                                                           std::vector<torch::nn::Module*> models,
                                                           const TensorParallelParts* parts);

// Every process's random generators and its loaders' positions. On another
// number of processes, a process the checkpoint had restores its own; a new
// one keeps its generators and takes the last saved process's positions,
// rescaled so that the same samples count as consumed.
std::unique_ptr<checkpoint::CheckpointItem> random_states_item(
    std::vector<DataLoaderBase*> loaders);

}  // namespace accelerate
