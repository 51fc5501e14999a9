// Torch-free pieces of save_model / load_model: shard sizes, the greedy
// sharding rule, shard file names and the model.safetensors.index.json file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace accelerate::safetensors {

// "10GB" (10^9 bytes per GB), "5MiB" (2^20 per MiB), "100KB", "1Gb" (bits:
// an eighth of GB), "4096" (bytes), as Hugging Face's
// convert_file_size_to_int. Throws ConfigError naming the text otherwise.
uint64_t parse_size(const std::string& text);

// Hugging Face's sharding: tensors in state-dict order are packed greedily;
// a shard is closed when the next tensor would take it over
// `max_shard_size`, and a tensor bigger than that gets a shard of its own.
// Returns the indices of `sizes` in each shard. Never returns an empty
// shard, and returns one empty shard for no tensors.
std::vector<std::vector<size_t>> plan_shards(const std::vector<uint64_t>& sizes,
                                             uint64_t max_shard_size);

// "model-00001-of-00003.safetensors" for shard_file_name("model", 0, 3, ".safetensors").
std::string shard_file_name(const std::string& stem, size_t index, size_t count,
                            const std::string& extension);
// True for names shard_file_name could have made for `stem`/`extension`.
bool is_shard_file_name(const std::string& name, const std::string& stem,
                        const std::string& extension);

struct ShardIndex {
  uint64_t total_size = 0;
  std::map<std::string, std::string> weight_map;  // tensor name -> file name
  std::vector<std::string> files;                 // distinct files, sorted
};

// The index file's text: {"metadata": {"total_size": N}, "weight_map": {...}}
// with sorted keys and two-space indentation, as Hugging Face writes it.
std::string index_json(const ShardIndex& index);
// Reads and validates an index file; file names must be plain names in the
// index's own directory (no '/', not "." or ".."). Throws Error naming it.
ShardIndex read_index(const std::string& path);

}  // namespace accelerate::safetensors
