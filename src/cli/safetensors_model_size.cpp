// model_size_from_path: a model's size from safetensors headers alone (a
// file, an index and its shards, or a directory), without reading weights.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "accelerate/common/errors.h"
#include "checkpoint/safetensors_header.h"
#include "cli/memory_estimate.h"

namespace accelerate::cli {
namespace {

bool is_directory(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool is_regular_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string parent_directory(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

uint64_t element_count(const safetensors::TensorEntry& tensor) {
  uint64_t elements = 1;
  for (int64_t dim : tensor.shape) elements *= static_cast<uint64_t>(dim);
  return elements;
}

// Accelerate sizes a model created in float32: every floating tensor counts
// 4 bytes per element whatever dtype the file stores; integer and bool
// tensors (buffers such as position ids) keep their own size.
uint64_t float32_bytes(const safetensors::TensorEntry& tensor, const std::string& source) {
  const bool floating = tensor.dtype.rfind("F", 0) == 0 || tensor.dtype.rfind("BF", 0) == 0;
  const size_t element_size = floating ? 4 : safetensors::dtype_size(tensor.dtype);
  if (element_size == 0) {
    throw ConfigError(source + ": tensor '" + safetensors::printable(tensor.name) +
                      "' has unknown dtype '" + safetensors::printable(tensor.dtype) + "'");
  }
  return element_count(tensor) * element_size;
}

// Adds one file's tensors; layers are keyed by the name up to the last '.'
// ("model.layers.0.mlp.up_proj.weight" -> "model.layers.0.mlp.up_proj"),
// which is the leaf module that owns them.
void add_file(const std::string& path, ModelSize& size, std::map<std::string, uint64_t>& layers,
              std::set<std::string>* names) {
  const safetensors::Header header = safetensors::read_header(path);
  for (const auto& tensor : header.tensors) {
    const uint64_t bytes = float32_bytes(tensor, path);
    size.parameters += element_count(tensor);
    size.total_bytes += bytes;
    const auto dot = tensor.name.rfind('.');
    layers[dot == std::string::npos ? tensor.name : tensor.name.substr(0, dot)] += bytes;
    if (names) names->insert(tensor.name);
  }
}

void set_largest_layer(ModelSize& size, const std::map<std::string, uint64_t>& layers) {
  auto largest = std::max_element(layers.begin(), layers.end(),
                                  [](const auto& a, const auto& b) { return a.second < b.second; });
  size.largest_layer_bytes = largest->second;
  size.largest_layer_name = largest->first;
}

std::vector<std::string> read_index(const std::string& index_path,
                                    std::map<std::string, std::string>& weight_map) {
  std::ifstream in(index_path);
  if (!in) throw ConfigError(index_path + ": cannot open the index");
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    throw ConfigError(index_path + ": not valid JSON (" + error.what() + ")");
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw ConfigError(index_path + ": no \"weight_map\" object (expected a safetensors index)");
  }
  std::vector<std::string> shards;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) {
      throw ConfigError(index_path + ": weight_map entry '" + safetensors::printable(name) +
                        "' is not a file name");
    }
    const std::string shard = file.get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos) {
      throw ConfigError(index_path + ": weight_map entry '" + safetensors::printable(name) +
                        "' names '" + safetensors::printable(shard) +
                        "', which is not a file beside the index");
    }
    weight_map[name] = shard;
    if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
  }
  if (shards.empty()) throw ConfigError(index_path + ": weight_map lists no tensors");
  return shards;
}

ModelSize size_from_index(const std::string& index_path) {
  std::map<std::string, std::string> weight_map;
  const auto shards = read_index(index_path, weight_map);
  ModelSize size;
  std::map<std::string, uint64_t> layers;
  std::map<std::string, std::set<std::string>> names_by_shard;
  for (const auto& shard : shards) {
    const std::string shard_path = parent_directory(index_path) + "/" + shard;
    if (!is_regular_file(shard_path)) {
      throw ConfigError(index_path + ": shard '" + safetensors::printable(shard) + "' is missing");
    }
    add_file(shard_path, size, layers, &names_by_shard[shard]);
  }
  for (const auto& [name, shard] : weight_map) {
    if (!names_by_shard[shard].count(name)) {
      throw ConfigError(index_path + ": tensor '" + safetensors::printable(name) +
                        "' is not in its shard '" + safetensors::printable(shard) + "'");
    }
  }
  set_largest_layer(size, layers);
  return size;
}

std::vector<std::string> safetensors_files_in(const std::string& directory) {
  std::vector<std::string> files;
  if (DIR* dir = ::opendir(directory.c_str())) {
    while (const dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (ends_with(name, ".safetensors") && is_regular_file(directory + "/" + name)) {
        files.push_back(directory + "/" + name);
      }
    }
    ::closedir(dir);
  }
  std::sort(files.begin(), files.end());
  return files;
}

ModelSize size_from_files(const std::vector<std::string>& files, const std::string& source) {
  ModelSize size;
  std::map<std::string, uint64_t> layers;
  for (const auto& file : files) add_file(file, size, layers, nullptr);
  if (layers.empty()) throw ConfigError(source + ": holds no tensors");
  set_largest_layer(size, layers);
  return size;
}

}  // namespace

ModelSize model_size_from_path(const std::string& path) {
  if (is_directory(path)) {
    const std::string index = path + "/model.safetensors.index.json";
    if (is_regular_file(index)) return size_from_index(index);
    const std::string single = path + "/model.safetensors";
    if (is_regular_file(single)) return size_from_files({single}, single);
    const auto files = safetensors_files_in(path);
    if (files.empty()) {
      throw ConfigError(
          path + ": no model.safetensors.index.json or *.safetensors file in this directory");
    }
    return size_from_files(files, path);
  }
  if (!is_regular_file(path)) throw ConfigError(path + ": no such file or directory");
  if (ends_with(path, ".json")) return size_from_index(path);
  if (ends_with(path, ".safetensors")) return size_from_files({path}, path);
  try {
    return size_from_files({path}, path);
  } catch (const Error& error) {
    // Most likely a pytorch_model.bin or a GGUF file: say what we read.
    throw ConfigError(std::string(error.what()) +
                      " (estimate-memory reads .safetensors files and safetensors indexes only)");
  }
}

}  // namespace accelerate::cli
