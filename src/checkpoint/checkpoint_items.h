// CheckpointItem: one thing a save_state folder holds (a model's weights, an
// optimizer's state or its shards, a scheduler, the loss scaler, a
// registered object, a process's random states and loader positions), with
// the three steps the Accelerator runs over every item:
//
//   save_state:  write every item            (then the metadata, then rename)
//   load_state:  check every item            (read and validate; change nothing)
//                agree across processes      (one failed: all stop, same error)
//                apply every item            (nothing left to fail but I/O)
//
// as LevelDB's VersionSet::Recover reads the whole manifest before it
// installs anything. Items are built per call from what is prepared, in
// prepare() order. Internal.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "accelerate/checkpoint/checkpointing.h"
#include "checkpoint/checkpoint_files.h"

namespace torch::serialize {
class InputArchive;
class OutputArchive;
}  // namespace torch::serialize

namespace accelerate::checkpoint {

// Who is writing or reading, and where.
struct ItemContext {
  const CheckpointFiles& files;
  int rank = 0;
  int world_size = 1;
  bool sync_to_disk = false;
  // load_state: what the folder says it holds (world_size: the processes
  // that saved it).
  const CheckpointMetadata* metadata = nullptr;
  // Where this process's shards sit (ParallelEngine::ShardPlace): its rank
  // and their number among the processes sharing them, and whether it
  // writes them (under hybrid sharding only the first machine's processes
  // do: the other machines hold the same shards).
  int shard_rank = 0;
  int shard_world_size = 1;
  bool writes_shards = true;
  // This process's rank in its tensor-parallel group, and the group's size.
  int tensor_parallel_rank = 0;
  int tensor_parallel_size = 1;

  bool main_process() const { return rank == 0; }
  int saved_world() const { return metadata ? metadata->world_size : world_size; }
  // The processes the saved shards were cut for.
  int saved_shard_world() const {
    return metadata ? metadata->shards_saved_by() : shard_world_size;
  }
  int saved_tensor_parallel_size() const { return metadata ? metadata->tensor_parallel_size : 1; }
  // Called as each file is complete: its write-back starts now (sync_to_disk).
  void written(const std::string& path) const;
};

// Whether the metadata's list of item indices (sharded_models, ...) holds `index`.
inline bool lists_index(const std::vector<int64_t>& indices, std::size_t index) {
  for (int64_t i : indices) {
    if (i == static_cast<int64_t>(index)) return true;
  }
  return false;
}

class CheckpointItem {
 public:
  virtual ~CheckpointItem() = default;
  // Writes this process's files of the item. Items whose writing is
  // collective (weights gathered group by group) take part in every
  // collective even when writing fails, and then throw.
  virtual void write(const ItemContext& context) = 0;
  // What the metadata must say for load_state to read the item back (the
  // indices of sharded models and optimizers).
  virtual void describe(CheckpointMetadata& metadata) const { (void)metadata; }
  // Reads and checks everything apply() needs; Error naming the file (and
  // tensor) when anything is missing or does not fit. Changes nothing.
  virtual void check(const ItemContext& context) = 0;
  virtual void apply(const ItemContext& context) = 0;
};

using CheckpointItems = std::vector<std::unique_ptr<CheckpointItem>>;

// An item that is one torch::serialize archive written by the main process
// (a scheduler, the loss scaler, a registered object), read back by every
// process.
std::unique_ptr<CheckpointItem> archive_item(
    std::string path, std::function<void(torch::serialize::OutputArchive&)> save,
    std::function<void(torch::serialize::InputArchive&)> load);

// save_state over `items`: every item writes, even after one failed (so
// that no process waits alone in a collective); the first error, or "".
std::string write_items(const CheckpointItems& items, const ItemContext& context);
// load_state's check step over `items`: throws the first item's error (the
// caller agrees on it across processes before apply_items).
void check_items(const CheckpointItems& items, const ItemContext& context);
void apply_items(const CheckpointItems& items, const ItemContext& context);

// Error unless the checkpoint holds `saved` objects of a kind (`what`) where
// the program prepared `prepared`.
void require_count(const std::string& folder, const char* what, std::int64_t saved,
                   std::size_t prepared);

}  // namespace accelerate::checkpoint
