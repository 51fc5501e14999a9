// save_model / load_model: a module's weights in Hugging Face's layout, so
// transformers / Accelerate load what we save and we load what they save.
//
//   accelerate::save_model(*model, "out");                      // out/model.safetensors
//   accelerate::save_model(*model, "out", accelerate::SaveModelOptions().max_shard_size("500MB"));
//   accelerate::load_model(*model, "out");                      // file, index or folder
//
// Names are the state-dict names Python would use ("layers.0.weight"):
// each module's parameters, then its buffers, then its children's, in
// registration order. Parameters registered under two names (tied weights)
// are saved once, under the first name, as Accelerate does.
//
// In a distributed job only the main process should call save_model (the
// Accelerator's save_model does that and waits for the others); every process
// may call load_model. See docs/safetensors.md.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "accelerate/common/arg.h"

namespace torch::nn {
class Module;
}

namespace accelerate {

// A size in bytes, given as a number or as Hugging Face writes it: "10GB"
// (10^9), "500MB", "2GiB" (2^30), "100KB". Text is checked when used: a bad
// string makes save_model throw ConfigError naming it.
class ShardSize {
 public:
  template <class Integer, std::enable_if_t<std::is_integral_v<Integer>, int> = 0>
  ShardSize(Integer bytes) {  // NOLINT: implicit on purpose, like Python's int | str
    if constexpr (std::is_signed_v<Integer>) negative_ = bytes < 0;
    bytes_ = negative_ ? 0 : static_cast<uint64_t>(bytes);
  }
  ShardSize(std::string text) : text_(std::move(text)) {}  // NOLINT
  ShardSize(const char* text) : text_(text) {}             // NOLINT
  // The number of bytes; throws ConfigError for bad text or a negative number.
  uint64_t bytes() const;

 private:
  uint64_t bytes_ = 0;
  bool negative_ = false;
  std::string text_;
};

struct SaveModelOptions {
  // Shards above this size are split, as max_shard_size in Accelerate.
  ACCELERATE_ARG(ShardSize, max_shard_size) = ShardSize("10GB");
  // true: model.safetensors. false: pytorch_model.bin (a pickled state dict,
  // read by Python's torch.load), sharded the same way.
  ACCELERATE_ARG(bool, safe_serialization) = true;
};

// The module's state dict in Python's order (see above), tied duplicates
// included. Tensors are the module's own (no copies).
std::vector<std::pair<std::string, at::Tensor>> module_state_dict(const torch::nn::Module& module);

// Writes the module's weights into `save_directory` (created if missing):
// model.safetensors, or model-0000i-of-0000N.safetensors shards plus
// model.safetensors.index.json when they exceed max_shard_size. Weight files
// of an earlier save_model in the folder that this save does not produce are
// removed, so a folder never mixes two saves. Returns the files written.
std::vector<std::string> save_model(const torch::nn::Module& module,
                                    const std::string& save_directory,
                                    const SaveModelOptions& options = {});

struct LoadModelResult {
  std::vector<std::string> missing_keys;     // in the module, not in the files
  std::vector<std::string> unexpected_keys;  // in the files, not in the module
};

// Loads weights by name into the module's existing tensors (any device), with
// no autograd history. `path` is a folder written by save_model (or by
// Hugging Face), a .safetensors file, a .bin file or an index .json file.
// strict: missing or unexpected names throw Error listing them. Shape or
// dtype differences always throw Error naming the file and tensor. Every
// check runs before the first tensor is written, so a refused load leaves
// the module as it was.
LoadModelResult load_model(torch::nn::Module& module, const std::string& path, bool strict = true);

}  // namespace accelerate
