// `accelerate merge-weights --include_optimizer`: the parts of a merged
// one-process checkpoint besides the models. Sharded (ZeRO) optimizer state
// becomes one shard of one process (through the LibTorch-linked helper
// accelerate-merge-optimizer), every other file of the checkpoint is copied,
// and accelerate_checkpoint.json is rewritten last. Torch-free.
#pragma once

#include <string>

#include "accelerate/detail/checkpoint_metadata.h"

namespace accelerate::cli {

constexpr const char* kOptimizerMergeProgram = "accelerate-merge-optimizer";

// Every optimizer file the merge reads is there (one line naming the first
// missing one), and the helper program is found; returns its path.
std::string check_optimizer_files(const std::string& checkpoint_dir,
                                  const CheckpointMetadata& metadata);

// Writes into `staging` the merged optimizers, copies of every other file
// of `checkpoint_dir` that is neither a model's nor a merged optimizer's,
// and the metadata of a checkpoint whose models are whole and whose
// optimizer shards were cut for one process (written last).
void write_checkpoint_rest(const std::string& checkpoint_dir, const CheckpointMetadata& metadata,
                           const std::string& helper, const std::string& staging);

}  // namespace accelerate::cli
