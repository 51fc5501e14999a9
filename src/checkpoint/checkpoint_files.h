// Every file name inside a save_state folder, made here and nowhere else (as
// LevelDB's db/filename.h names every file of a database): the layout of
// docs/checkpoint-format.md, which mirrors Hugging Face Accelerate's. The
// first object of each kind has the bare name (model.safetensors), the
// others an index (model_1.safetensors). Internal and torch-free: the
// command line (`accelerate merge-weights`) reads checkpoints by these names.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace accelerate::checkpoint {

class CheckpointFiles {
 public:
  explicit CheckpointFiles(std::string folder) : folder_(std::move(folder)) {}
  const std::string& folder() const { return folder_; }

  std::string metadata() const;  // accelerate_checkpoint.json
  // Model i's weights: one file (model[_i].safetensors), or each process's
  // pieces (model[_i]_rank<r>.safetensors) with their index
  // (model[_i]_shards.json).
  std::string model(std::size_t i) const;
  std::string model_piece(std::size_t i, int rank) const;
  std::string model_pieces_index(std::size_t i) const;
  // Optimizer i's state: an archive (optimizer[_i].bin) and its tensors
  // beside it (.safetensors), or each process's shard's
  // (optimizer[_i]_rank<r>.bin / .safetensors) with how the shards cut the
  // parameters (optimizer[_i]_partition.json). At tensor parallelism each
  // tp rank t's shards of its parts: optimizer[_i]_tp<t>_rank<r>.bin and
  // optimizer[_i]_tp<t>_partition.json.
  std::string optimizer(std::size_t i) const;
  std::string optimizer_shard(std::size_t i, int rank,
                              std::optional<int> tp_rank = std::nullopt) const;
  // The tensor file beside an optimizer archive (".bin" -> ".safetensors").
  static std::string tensors_beside(const std::string& archive);
  std::string optimizer_partition(std::size_t i, std::optional<int> tp_rank = std::nullopt) const;
  std::string scheduler(std::size_t i) const;      // scheduler[_i].bin
  std::string scaler() const;                      // scaler.pt
  std::string custom_object(std::size_t i) const;  // custom_checkpoint_<i>.bin
  std::string random_states(int rank) const;       // random_states_<r>.bin

 private:
  std::string path(const std::string& name) const;
  std::string folder_;
};

// {project_dir}/checkpoints: where automatically named checkpoints go.
std::string checkpoints_folder(const std::string& project_dir);

// Writes `text` to a new file at `path`; Error naming the path on failure.
void write_text_file(const std::string& path, const std::string& text);
// The whole text of checkpoint file `path`; Error "checkpoint file <path> is
// missing (<what>)" when it cannot be opened.
std::string read_checkpoint_file(const std::string& path, const std::string& what);

}  // namespace accelerate::checkpoint
