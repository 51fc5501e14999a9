#include "checkpoint/checkpoint_files.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "accelerate/common/errors.h"
#include "accelerate/detail/checkpoint_metadata.h"

namespace accelerate::checkpoint {
namespace {

// "model", 0 -> "model"; "model", 2 -> "model_2".
std::string indexed(const std::string& stem, std::size_t index) {
  return index == 0 ? stem : stem + "_" + std::to_string(index);
}

std::string rank_suffix(int rank) { return "_rank" + std::to_string(rank); }

// The optimizer files' stem: optimizer[_i], and at tensor parallelism _tp<t>.
std::string optimizer_stem(std::size_t i, std::optional<int> tp_rank) {
  return indexed("optimizer", i) + (tp_rank ? "_tp" + std::to_string(*tp_rank) : "");
}

}  // namespace

std::string CheckpointFiles::path(const std::string& name) const {
  return (std::filesystem::path(folder_) / name).string();
}

std::string CheckpointFiles::metadata() const { return path(kCheckpointMetadataFile); }

std::string CheckpointFiles::model(std::size_t i) const {
  return path(indexed("model", i) + ".safetensors");
}

std::string CheckpointFiles::model_piece(std::size_t i, int rank) const {
  return path(indexed("model", i) + rank_suffix(rank) + ".safetensors");
}

std::string CheckpointFiles::model_pieces_index(std::size_t i) const {
  return path(indexed("model", i) + "_shards.json");
}

std::string CheckpointFiles::optimizer(std::size_t i) const {
  return path(indexed("optimizer", i) + ".bin");
}

std::string CheckpointFiles::optimizer_shard(std::size_t i, int rank,
                                             std::optional<int> tp_rank) const {
  return path(optimizer_stem(i, tp_rank) + rank_suffix(rank) + ".bin");
}

std::string CheckpointFiles::tensors_beside(const std::string& archive) {
  return std::filesystem::path(archive).replace_extension(".safetensors").string();
}

std::string CheckpointFiles::optimizer_partition(std::size_t i, std::optional<int> tp_rank) const {
  return path(optimizer_stem(i, tp_rank) + "_partition.json");
}

std::string CheckpointFiles::scheduler(std::size_t i) const {
  return path(indexed("scheduler", i) + ".bin");
}

std::string CheckpointFiles::scaler() const { return path("scaler.pt"); }

std::string CheckpointFiles::custom_object(std::size_t i) const {
  return path("custom_checkpoint_" + std::to_string(i) + ".bin");
}

std::string CheckpointFiles::random_states(int rank) const {
  return path("random_states_" + std::to_string(rank) + ".bin");
}

std::string checkpoints_folder(const std::string& project_dir) {
  return (std::filesystem::path(project_dir) / "checkpoints").string();
}

void write_text_file(const std::string& path, const std::string& text) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) throw Error("cannot create " + path + ": " + std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  const int saved = errno;
  if (std::fclose(file) != 0 || !written) {
    throw Error("cannot write " + path + ": " + std::strerror(written ? errno : saved));
  }
}

std::string read_checkpoint_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("checkpoint file " + path + " is missing (" + what + ")");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace accelerate::checkpoint
