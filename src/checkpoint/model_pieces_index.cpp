#include "checkpoint/model_pieces_index.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "accelerate/common/errors.h"
#include "checkpoint/checkpoint_files.h"

namespace accelerate::checkpoint {

int64_t SavedTensor::numel() const {
  int64_t elements = 1;
  for (int64_t dim : shape) elements *= dim;
  return elements;
}

std::string ModelPiecesIndex::to_json() const {
  // Ordered: the file keeps the state-dict order, which merge-weights needs
  // to shard a merged model as save_model does.
  nlohmann::ordered_json tensors_json = nlohmann::ordered_json::object();
  for (const SavedTensor& tensor : tensors) {
    nlohmann::ordered_json pieces = nlohmann::ordered_json::array();
    for (const SavedPiece& piece : tensor.pieces)
      pieces.push_back({piece.rank, piece.offset, piece.numel});
    tensors_json[tensor.name] = {
        {"dtype", tensor.dtype}, {"shape", tensor.shape}, {"pieces", pieces}};
  }
  nlohmann::ordered_json json = {{"world_size", world_size}, {"tensors", tensors_json}};
  return json.dump(1) + "\n";
}

ModelPiecesIndex ModelPiecesIndex::from_json(const std::string& text, const std::string& source) {
  using Json = nlohmann::ordered_json;
  ModelPiecesIndex index;
  try {
    const Json json = Json::parse(text);
    index.world_size = json.at("world_size").get<int>();
    if (index.world_size < 1) throw Error(source + ": world_size must be at least 1");
    for (const auto& [name, saved] : json.at("tensors").items()) {
      SavedTensor tensor;
      tensor.name = name;
      tensor.dtype = saved.at("dtype").get<std::string>();
      if (safetensors::dtype_size(tensor.dtype) == 0) {
        throw Error(source + ": tensor '" + name + "' has an unknown dtype");
      }
      tensor.shape = saved.at("shape").get<std::vector<int64_t>>();
      for (const auto& piece : saved.at("pieces")) {
        const int rank = piece.at(0).get<int>();
        if (rank < 0 || rank >= index.world_size) {
          throw Error(source + ": tensor '" + name + "' names process " + std::to_string(rank) +
                      " of " + std::to_string(index.world_size));
        }
        tensor.pieces.push_back({rank, piece.at(1).get<int64_t>(), piece.at(2).get<int64_t>()});
      }
      index.tensors.push_back(std::move(tensor));
    }
  } catch (const Json::exception& e) {
    throw Error(source + ": not a model shard index (" + e.what() + ")");
  }
  return index;
}

ModelPiecesIndex ModelPiecesIndex::read(const std::string& path) {
  return from_json(read_checkpoint_file(path, "the model's shard index"), path);
}

std::vector<SavedPiece> checked_pieces(const SavedTensor& tensor, const std::string& source,
                                       const PieceLookup& lookup,
                                       const std::function<std::string(int)>& file_of) {
  // Empty pieces (a tensor of no elements is saved as one) hold nothing.
  std::vector<SavedPiece> pieces;
  bool negative = false;
  for (const SavedPiece& piece : tensor.pieces) {
    if (piece.numel != 0) pieces.push_back(piece);
    negative = negative || piece.numel < 0;
  }
  std::sort(pieces.begin(), pieces.end(),
            [](const SavedPiece& a, const SavedPiece& b) { return a.offset < b.offset; });
  int64_t covered = 0;
  bool tiled = !negative;
  for (const SavedPiece& piece : pieces) {
    if (!tiled || piece.offset != covered) {
      tiled = false;
      break;
    }
    covered += piece.numel;
    const std::optional<safetensors::TensorEntry> saved = lookup(piece.rank, tensor.name);
    if (!saved) throw Error(file_of(piece.rank) + ": tensor '" + tensor.name + "' is missing");
    int64_t elements = 1;
    for (int64_t dim : saved->shape) elements *= dim;
    if (saved->dtype != tensor.dtype || elements != piece.numel) {
      throw Error(file_of(piece.rank) + ": tensor '" + tensor.name + "' is not the piece " +
                  source + " describes");
    }
  }
  if (!tiled || covered != tensor.numel()) {
    throw Error(source + ": the pieces of tensor '" + tensor.name + "' do not cover its " +
                std::to_string(tensor.numel()) + " elements exactly once");
  }
  return pieces;
}

}  // namespace accelerate::checkpoint
