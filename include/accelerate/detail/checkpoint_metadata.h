// The checkpoint folder's metadata file (accelerate_checkpoint.json): its
// name, format version and contents. Torch-free, so the command line
// (`accelerate merge-weights`) reads checkpoints with the library's own
// parser; users get it through accelerate/checkpoint/checkpointing.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accelerate {

// Version of the folder layout; loading refuses newer versions. 2: built-in
// optimizers' state tensors in optimizer.safetensors (1: all in optimizer.bin).
constexpr int kCheckpointFormatVersion = 2;
// Written last; its presence marks a complete checkpoint.
constexpr const char* kCheckpointMetadataFile = "accelerate_checkpoint.json";

// What accelerate_checkpoint.json records.
struct CheckpointMetadata {
  int format_version = kCheckpointFormatVersion;
  int world_size = 1;
  int64_t models = 0;
  int64_t optimizers = 0;
  int64_t schedulers = 0;
  int64_t dataloaders = 0;
  int64_t custom_objects = 0;
  bool scaler = false;
  int64_t step = 0;             // Accelerator::step()
  int64_t optimizer_steps = 0;  // GradientState::optimizer_steps()
  // ZeRO: the optimizers (by index) whose state each process saved for its
  // own shard, in optimizer[_i]_rank<r>.bin / .safetensors. Absent from
  // older checkpoints: none.
  std::vector<int64_t> sharded_optimizers;
  // ZeRO stage 3 with a sharded state dict: the models (by index) each
  // process saved its pieces of, in model[_i]_rank<r>.safetensors with the
  // index model[_i]_shards.json, instead of model[_i].safetensors. Absent
  // from older checkpoints: none.
  std::vector<int64_t> sharded_models;
  // Hybrid sharding: the processes the model pieces and optimizer shards
  // were cut for (one machine's: one copy is saved, not one per machine).
  // 0, absent from other checkpoints: world_size.
  int shard_world_size = 0;
  int shards_saved_by() const { return shard_world_size > 0 ? shard_world_size : world_size; }
  // Tensor parallelism: the tp size of the job that saved it (its sharded
  // optimizers were saved per tp rank). 1, absent from other checkpoints.
  int tensor_parallel_size = 1;

  std::string to_json() const;
  // `source` names the file in errors.
  static CheckpointMetadata from_json(const std::string& text, const std::string& source);
};

// The metadata of the checkpoint in `directory`; throws Error naming the
// folder when it is missing, incomplete or from a newer format.
CheckpointMetadata read_checkpoint_metadata(const std::string& directory);
bool is_complete_checkpoint(const std::string& directory);

}  // namespace accelerate
