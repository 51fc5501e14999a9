// The checkpoint items ZeRO hands out (ShardedEngine::model_item and
// optimizer_item): stage 3's weights, written as each process's pieces or
// whole group by group and read into the shards by element ranges; and a
// sharded optimizer's state, each process writing its shard (at tensor
// parallelism each tp rank's shards of its parts) and reading its shard
// back from another number of processes or another tp. Internal.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "accelerate/checkpoint/safetensors.h"
#include "checkpoint/checkpoint_items.h"
#include "checkpoint/model_streaming.h"
#include "parallel/tensor_parallel_lookup.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn
namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace accelerate::sharding {

class ModelShards;
class ShardedOptimizer;

// Model `index`, whose weights `shards` holds (stage 3). On save: each
// process's pieces (`in_pieces`: DeepSpeed's and FSDP's sharded state
// dicts), else `weights` (its state dict as the pre-hooks left it) written
// by the main process whole, group by group where `groups` gives the
// groups (null: the weights were gathered whole before).
std::unique_ptr<checkpoint::CheckpointItem> sharded_model_item(
    torch::nn::Module& model, std::size_t index, NamedTensors weights, ModelShards& shards,
    bool in_pieces, std::function<std::unique_ptr<checkpoint::WeightGroups>()> groups);

// Optimizer `index`, whose state `shards` shards over the processes of
// this process's tensor-parallel rank; `find_part`: where the model's
// tensor-parallel parts lie.
std::unique_ptr<checkpoint::CheckpointItem> sharded_optimizer_item(
    torch::optim::Optimizer& optimizer, std::size_t index, ShardedOptimizer& shards,
    FindTensorParallelPart find_part);

}  // namespace accelerate::sharding
