// `accelerate merge-weights`: a checkpoint's model (whole, or in pieces per
// process) written as Hugging Face's safetensors layout, the bytes
// save_model writes for the same weights. Torch-free; one tensor streamed at
// a time through fixed buffers, so memory stays flat whatever the model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace accelerate::cli {

struct MergeOptions {
  std::string checkpoint_dir;
  std::string output_dir;
  uint64_t max_shard_size = 10'000'000'000;  // save_model's "10GB"
  std::string dtype;                         // "", "BF16" or "F16": floating tensors in it
  std::size_t model = 0;                     // which model of the checkpoint
  bool remove_checkpoint_dir = false;
  // Instead of the model alone: a checkpoint one process resumes from
  // (every model whole, ZeRO optimizer shards merged into one process's).
  bool include_optimizer = false;
};

struct MergeResult {
  std::vector<std::string> files;  // as save_model returns them
  std::size_t tensors = 0;
  uint64_t bytes = 0;  // of tensor data
};

// Reads and checks everything before the first byte is written (a missing,
// torn or truncated file is an Error naming it), writes into a temporary
// folder beside `output_dir` and renames it into place: `output_dir` either
// is complete or is not there (it must not exist, or be an empty folder).
MergeResult merge_weights(const MergeOptions& options);

}  // namespace accelerate::cli
