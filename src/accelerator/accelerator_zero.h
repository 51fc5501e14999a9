// The Accelerator's ZeRO parts (docs/sharding.md), shared by the files that
// implement the Accelerator (prepare and the step in accelerator.cpp,
// save_state/load_state in accelerator_checkpoint.cpp). Internal.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "accelerate/accelerator.h"
#include "sharding/zero_optimizer.h"

namespace accelerate {

// The shards of each prepared model, and the sharded optimizers stepping
// them. Only in multi-process jobs: with one process every stage is data
// parallelism.
struct Accelerator::Zero {
  int stage = 0;
  std::vector<std::shared_ptr<sharding::ModelShards>> models;
  std::vector<std::shared_ptr<sharding::ShardedOptimizer>> optimizers;

  // The sharded optimizer stepping `optimizer`, or null.
  sharding::ShardedOptimizer* sharding(const torch::optim::Optimizer* optimizer) const {
    auto it = std::find_if(optimizers.begin(), optimizers.end(),
                           [&](const auto& sharded) { return &sharded->optimizer() == optimizer; });
    return it == optimizers.end() ? nullptr : it->get();
  }
};

}  // namespace accelerate
