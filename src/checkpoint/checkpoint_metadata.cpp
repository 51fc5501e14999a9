// accelerate_checkpoint.json: format version, world size, what was saved and
// the step counters. Written last; it marks a checkpoint complete.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "accelerate/common/errors.h"
#include "accelerate/detail/checkpoint_metadata.h"
#include "checkpoint/checkpoint_files.h"

namespace accelerate {
namespace fs = std::filesystem;

namespace {

constexpr const char* kFormatName = "accelerate-cpp checkpoint";

template <class T>
T field(const nlohmann::json& json, const char* key, const std::string& source) {
  auto it = json.find(key);
  if (it == json.end()) throw Error(source + ": key '" + key + "' is missing");
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(source + ": key '" + key + "' has the wrong type (" + it->type_name() + ")");
  }
}

}  // namespace

std::string CheckpointMetadata::to_json() const {
  nlohmann::json json = {
      {"format", kFormatName},
      {"format_version", format_version},
      {"world_size", world_size},
      {"models", models},
      {"optimizers", optimizers},
      {"schedulers", schedulers},
      {"dataloaders", dataloaders},
      {"custom_objects", custom_objects},
      {"scaler", scaler},
      {"step", step},
      {"optimizer_steps", optimizer_steps},
      {"sharded_optimizers", sharded_optimizers},
  };
  if (!sharded_models.empty()) json["sharded_models"] = sharded_models;
  if (shard_world_size > 0) json["shard_world_size"] = shard_world_size;
  if (tensor_parallel_size > 1) json["tensor_parallel_size"] = tensor_parallel_size;
  return json.dump(2) + "\n";
}

CheckpointMetadata CheckpointMetadata::from_json(const std::string& text,
                                                 const std::string& source) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    throw Error(source + ": not valid JSON (byte " + std::to_string(error.byte) + ")");
  }
  if (!json.is_object() || json.value("format", std::string()) != kFormatName) {
    throw Error(source + ": not an accelerate-cpp checkpoint metadata file");
  }
  CheckpointMetadata metadata;
  metadata.format_version = field<int>(json, "format_version", source);
  if (metadata.format_version > kCheckpointFormatVersion || metadata.format_version < 1) {
    throw Error(source + ": checkpoint format version " + std::to_string(metadata.format_version) +
                " is not supported by this accelerate-cpp (it reads versions 1 to " +
                std::to_string(kCheckpointFormatVersion) + ")");
  }
  metadata.world_size = field<int>(json, "world_size", source);
  metadata.models = field<int64_t>(json, "models", source);
  metadata.optimizers = field<int64_t>(json, "optimizers", source);
  metadata.schedulers = field<int64_t>(json, "schedulers", source);
  metadata.dataloaders = field<int64_t>(json, "dataloaders", source);
  metadata.custom_objects = field<int64_t>(json, "custom_objects", source);
  metadata.scaler = field<bool>(json, "scaler", source);
  metadata.step = field<int64_t>(json, "step", source);
  metadata.optimizer_steps = field<int64_t>(json, "optimizer_steps", source);
  if (json.contains("sharded_optimizers")) {
    metadata.sharded_optimizers = field<std::vector<int64_t>>(json, "sharded_optimizers", source);
  }
  if (json.contains("sharded_models")) {
    metadata.sharded_models = field<std::vector<int64_t>>(json, "sharded_models", source);
  }
  if (json.contains("shard_world_size")) {
    metadata.shard_world_size = field<int>(json, "shard_world_size", source);
    if (metadata.shard_world_size < 1 || metadata.shard_world_size > metadata.world_size ||
        metadata.world_size % metadata.shard_world_size != 0) {
      throw Error(source + ": shard_world_size " + std::to_string(metadata.shard_world_size) +
                  " does not divide world_size " + std::to_string(metadata.world_size));
    }
  }
  if (json.contains("tensor_parallel_size")) {
    metadata.tensor_parallel_size = field<int>(json, "tensor_parallel_size", source);
    if (metadata.tensor_parallel_size < 1 ||
        metadata.world_size % metadata.tensor_parallel_size != 0) {
      throw Error(source + ": tensor_parallel_size " +
                  std::to_string(metadata.tensor_parallel_size) + " does not divide world_size " +
                  std::to_string(metadata.world_size));
    }
  }
  return metadata;
}

bool is_complete_checkpoint(const std::string& directory) {
  std::error_code error;
  return fs::is_regular_file(checkpoint::CheckpointFiles(directory).metadata(), error);
}

CheckpointMetadata read_checkpoint_metadata(const std::string& directory) {
  std::error_code error;
  if (!fs::is_directory(directory, error)) {
    throw Error("checkpoint folder " + directory + " does not exist");
  }
  const std::string path = checkpoint::CheckpointFiles(directory).metadata();
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(directory + " is not a complete accelerate-cpp checkpoint: " + path +
                " is missing");
  }
  std::stringstream text;
  text << in.rdbuf();
  return CheckpointMetadata::from_json(text.str(), path);
}

}  // namespace accelerate
