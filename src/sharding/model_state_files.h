// A model's weights in a checkpoint as element ranges, so that ZeRO stage 3
// never needs a whole model on one process to save or load them:
// - saved as pieces (FSDP's SHARDED_STATE_DICT, and DeepSpeed's stage-3
//   checkpoints): every process writes the elements its shards hold
//   (model_rank<r>.safetensors), the main process an index of which process
//   holds which elements of which tensor;
// - or whole, in one safetensors file (save_model's, or FULL_STATE_DICT's).
// Either loads into a model sharded over any number of processes (each
// process reads only the elements its shards hold) or into a whole model.
// Internal to the library; the layout is in docs/sharding.md.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "accelerate/checkpoint/safetensors.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace accelerate {
class GradientReducer;
}  // namespace accelerate

namespace accelerate::sharding {

class ModelShards;

// Where process `rank` of `world` holds a parameter's elements: elements
// [offset, offset + numel) of reducer parameter `parameter` are elements
// [shard_offset, ...) of its shard of bucket `bucket`.
struct ShardPiece {
  std::size_t parameter = 0;
  std::int64_t offset = 0;
  std::int64_t numel = 0;
  std::size_t bucket = 0;
  std::int64_t shard_offset = 0;
};
std::vector<ShardPiece> shard_pieces(const GradientReducer& reducer, int rank, int world);

// Writes this process's pieces of `module`, whose parameters `shards` shards
// over `world` processes, to `file`: of each parameter in a bucket the
// elements this process's shard holds; every other tensor (buffers, frozen
// parameters) whole, from process 0 only. With `index_path` (the main
// process), also the index of every process's pieces.
void save_model_pieces(const torch::nn::Module& module, const ModelShards& shards, int rank,
                       int world, const std::string& file, const std::string& index_path);

class ModelStateFiles {
 public:
  // Saved as pieces: the index save_model_pieces wrote, and saved process
  // k's file at file_of(k). Reads the index and every file's header.
  static ModelStateFiles from_index(const std::string& index_path,
                                    const std::function<std::string(int)>& file_of);
  // Whole, in one safetensors file.
  static ModelStateFiles from_file(const std::string& path);

  // Error naming the file and tensor unless every tensor of `module`'s
  // state is there with its shape and dtype, its pieces cover it exactly,
  // and each piece is in its file.
  void check(const torch::nn::Module& module) const;
  // Copies the saved elements into `module` (no autograd history): with
  // `shards` (stage 3), into this process's shards and the tensors that no
  // shard holds (the caller then all-gathers the buffers that are whole);
  // without, into every tensor. Reads only the pieces it needs.
  void load_into(torch::nn::Module& module, ModelShards* shards) const;

 private:
  struct Piece {
    std::size_t file = 0;
    std::int64_t offset = 0;
    std::int64_t numel = 0;
  };
  struct Entry {
    at::ScalarType dtype = at::kFloat;
    std::vector<std::int64_t> shape;
    std::vector<Piece> pieces;
  };
  // Elements [offset, offset + destination.numel()) of `name` into `destination`.
  void fill(const std::string& name, std::int64_t offset, const at::Tensor& destination) const;

  std::string source_;  // the index or the file, for messages
  std::vector<SafetensorsReader> files_;
  std::map<std::string, Entry> tensors_;
};

}  // namespace accelerate::sharding
