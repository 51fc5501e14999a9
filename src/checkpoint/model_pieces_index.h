// The index of a model saved as pieces (model[_i]_shards.json, written by
// sharding::save_model_pieces): every tensor of the model's state dict, in
// state-dict order, with its dtype, shape and which process's file
// (model[_i]_rank<r>.safetensors) holds which of its elements. Torch-free:
// loading (sharding::ModelStateFiles) and `accelerate merge-weights` read it
// with this one parser. The layout is in docs/sharding.md.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/safetensors_header.h"

namespace accelerate::checkpoint {

// Elements [offset, offset + numel) of a tensor, in process `rank`'s file
// (flattened, under the tensor's own name).
struct SavedPiece {
  int rank = 0;
  int64_t offset = 0;
  int64_t numel = 0;
};

struct SavedTensor {
  std::string name;
  std::string dtype;  // safetensors' name: "F32", "BF16", ...
  std::vector<int64_t> shape;
  std::vector<SavedPiece> pieces;
  int64_t numel() const;
};

struct ModelPiecesIndex {
  int world_size = 1;
  std::vector<SavedTensor> tensors;  // state-dict order

  // The file's text; tensors keep their order (older indexes sorted them by
  // name, which reads the same but loses the order).
  std::string to_json() const;
  // Throws Error naming `source` for anything that is not such an index: a
  // bad world size, an unknown dtype, a piece naming no process of it.
  static ModelPiecesIndex from_json(const std::string& text, const std::string& source);
  static ModelPiecesIndex read(const std::string& path);
};

// The header entry of tensor `name` in process `rank`'s file, if it has one.
using PieceLookup =
    std::function<std::optional<safetensors::TensorEntry>(int rank, const std::string& name)>;

// Throws Error unless `tensor`'s pieces cover its elements exactly once and
// each lies in its process's file as the index says (same dtype, as many
// elements). `source` names the index, `file_of(rank)` a process's file.
// Returns the pieces sorted by offset.
std::vector<SavedPiece> checked_pieces(const SavedTensor& tensor, const std::string& source,
                                       const PieceLookup& lookup,
                                       const std::function<std::string(int)>& file_of);

}  // namespace accelerate::checkpoint
