// The facade's own checkpoint item: every process's random generators and
// its loaders' positions. The models' and optimizers' items come from the
// engine that trains them (ParallelEngine::model_item, optimizer_item); the
// facade's other items (schedulers, the loss scaler, registered objects)
// are plain archives. Internal.
#pragma once

#include <memory>
#include <vector>

#include "accelerate/data/data_loader.h"
#include "checkpoint/checkpoint_items.h"

namespace accelerate {

// On another number of processes, a process the checkpoint had restores its
// own generators; a new one keeps its own and takes the last saved
// process's positions. Positions are rescaled by the loaders' global batch
// so that the same samples count as consumed (other data-parallel sizes,
// batch sizes and tensor-parallel groups).
std::unique_ptr<checkpoint::CheckpointItem> random_states_item(
    std::vector<DataLoaderBase*> loaders);

}  // namespace accelerate
