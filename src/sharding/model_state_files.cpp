#include "sharding/model_state_files.h"

#include <algorithm>
#include <unordered_map>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/accumulate.h>
#include <torch/nn/module.h>

#include "accelerate/common/errors.h"
#include "accelerate/parallel/gradient_reducer.h"
#include "checkpoint/checkpoint_archives.h"
#include "checkpoint/model_pieces_index.h"
#include "checkpoint/model_streaming.h"
#include "checkpoint/safetensors_dtype.h"
#include "parallel/sharded_gradients.h"
#include "sharding/shard_layout.h"
#include "sharding/zero_optimizer.h"

namespace accelerate::sharding {

std::vector<ShardPiece> shard_pieces(const GradientReducer& reducer, int rank, int world) {
  std::vector<ShardPiece> pieces;
  const auto& parameters = reducer.parameters();
  const auto& buckets = reducer.buckets();
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const std::int64_t shard = ShardLayout::padded(buckets[b].numel, world) / world;
    const std::int64_t lo = rank * shard, hi = lo + shard;
    for (std::size_t index : buckets[b].parameter_indices) {
      const std::int64_t offset = detail::ShardedGradients::offset_in_bucket(reducer, index);
      const std::int64_t begin = std::max(offset, lo);
      const std::int64_t end = std::min(offset + parameters[index].numel(), hi);
      if (begin < end) pieces.push_back({index, begin - offset, end - begin, b, begin - lo});
    }
  }
  return pieces;
}

namespace {

std::string printable_shape(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace

void save_model_pieces(const torch::nn::Module& module, const ModelShards& shards, int rank,
                       int world, const std::string& file, const std::string& index_path) {
  const GradientReducer& reducer = shards.reducer();
  const NamedTensors state = checkpoint::unique_state_dict(module);
  const auto in_bucket = bucketed_parameters(reducer);
  std::vector<std::vector<ShardPiece>> by_rank;  // every process's, for the index
  for (int r = 0; r < world; ++r) by_rank.push_back(shard_pieces(reducer, r, world));

  NamedTensors mine;
  std::unordered_map<std::size_t, std::string> name_of;  // reducer index -> state name
  for (const auto& [name, tensor] : state) {
    auto it = in_bucket.find(tensor.unsafeGetTensorImpl());
    if (it != in_bucket.end()) {
      name_of[it->second] = name;
    } else if (rank == 0) {
      mine.emplace_back(name, tensor.detach().reshape({-1}));
    }
  }
  for (const ShardPiece& piece : by_rank[static_cast<std::size_t>(rank)]) {
    auto it = name_of.find(piece.parameter);
    if (it == name_of.end()) continue;  // not in this module's state (cannot happen)
    mine.emplace_back(
        it->second,
        shards.parameter_shard(piece.bucket).narrow(0, piece.shard_offset, piece.numel));
  }
  save_safetensors(file, mine, {{"format", "pt"}});
  if (index_path.empty()) return;

  checkpoint::ModelPiecesIndex index;
  index.world_size = world;
  std::unordered_map<std::string, std::size_t> position;  // state name -> index entry
  for (const auto& [name, tensor] : state) {
    checkpoint::SavedTensor saved{
        name, safetensors::dtype_name(tensor.scalar_type()), tensor.sizes().vec(), {}};
    if (in_bucket.count(tensor.unsafeGetTensorImpl()) == 0)
      saved.pieces.push_back({0, 0, tensor.numel()});
    position[name] = index.tensors.size();
    index.tensors.push_back(std::move(saved));
  }
  for (int r = 0; r < world; ++r) {
    for (const ShardPiece& piece : by_rank[static_cast<std::size_t>(r)]) {
      auto it = name_of.find(piece.parameter);
      if (it != name_of.end()) {
        index.tensors[position.at(it->second)].pieces.push_back({r, piece.offset, piece.numel});
      }
    }
  }
  checkpoint::write_text_file(index_path, index.to_json());
}

ModelStateFiles ModelStateFiles::from_index(const std::string& index_path,
                                            const std::function<std::string(int)>& file_of) {
  ModelStateFiles out;
  out.source_ = index_path;
  const checkpoint::ModelPiecesIndex index = checkpoint::ModelPiecesIndex::read(index_path);
  for (int k = 0; k < index.world_size; ++k) out.files_.emplace_back(file_of(k));
  for (const checkpoint::SavedTensor& saved : index.tensors) {
    Entry entry;
    const auto dtype = safetensors::scalar_type(saved.dtype);
    if (!dtype) throw Error(index_path + ": tensor '" + saved.name + "' has an unknown dtype");
    entry.dtype = *dtype;
    entry.shape = saved.shape;
    for (const checkpoint::SavedPiece& piece : saved.pieces) {
      entry.pieces.push_back({static_cast<std::size_t>(piece.rank), piece.offset, piece.numel});
    }
    out.tensors_[saved.name] = std::move(entry);
  }
  return out;
}

ModelStateFiles ModelStateFiles::from_file(const std::string& path) {
  ModelStateFiles out;
  out.source_ = path;
  out.files_.emplace_back(path);
  const SafetensorsReader& reader = out.files_.front();
  for (const std::string& name : reader.names()) {
    Entry entry;
    entry.dtype = reader.dtype(name);
    entry.shape = reader.shape(name);
    entry.pieces.push_back({0, 0, c10::multiply_integers(entry.shape)});
    out.tensors_[name] = std::move(entry);
  }
  return out;
}

void ModelStateFiles::check(const torch::nn::Module& module) const {
  for (const auto& [name, tensor] : checkpoint::unique_state_dict(module)) {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw Error(source_ + ": tensor '" + name + "' is missing");
    const Entry& entry = it->second;
    if (entry.shape != tensor.sizes().vec() || entry.dtype != tensor.scalar_type()) {
      throw Error(source_ + ": tensor '" + name + "' is " + c10::toString(entry.dtype) +
                  printable_shape(entry.shape) + " but the model's is " +
                  c10::toString(tensor.scalar_type()) + printable_shape(tensor.sizes().vec()));
    }
    checkpoint::SavedTensor saved{name, safetensors::dtype_name(entry.dtype), entry.shape, {}};
    for (const Piece& piece : entry.pieces) {
      saved.pieces.push_back({static_cast<int>(piece.file), piece.offset, piece.numel});
    }
    const auto lookup = [this](int rank, const std::string& tensor) {
      const SafetensorsReader& file = files_[static_cast<std::size_t>(rank)];
      std::optional<safetensors::TensorEntry> found;
      if (file.contains(tensor)) {
        const char* dtype = safetensors::dtype_name(file.dtype(tensor));
        found = safetensors::TensorEntry{tensor, dtype ? dtype : "", file.shape(tensor), 0, 0};
      }
      return found;
    };
    checkpoint::checked_pieces(saved, source_, lookup, [this](int rank) {
      return files_[static_cast<std::size_t>(rank)].path();
    });
  }
}

void ModelStateFiles::fill(const std::string& name, std::int64_t offset,
                           const at::Tensor& destination) const {
  const std::int64_t end = offset + destination.numel();
  for (const Piece& piece : tensors_.at(name).pieces) {
    const std::int64_t lo = std::max(offset, piece.offset);
    const std::int64_t hi = std::min(end, piece.offset + piece.numel);
    if (lo >= hi) continue;
    const at::Tensor saved = files_[piece.file].read(name).reshape({-1});
    destination.narrow(0, lo - offset, hi - lo).copy_(saved.narrow(0, lo - piece.offset, hi - lo));
  }
}

void ModelStateFiles::load_into(torch::nn::Module& module, ModelShards* shards) const {
  c10::NoGradGuard no_grad;
  std::unordered_map<const c10::TensorImpl*, std::size_t> in_bucket;
  if (shards != nullptr) in_bucket = bucketed_parameters(shards->reducer());
  std::unordered_map<std::size_t, std::string> name_of;  // reducer index -> state name
  for (const auto& [name, tensor] : checkpoint::unique_state_dict(module)) {
    auto it = in_bucket.find(tensor.unsafeGetTensorImpl());
    if (it != in_bucket.end()) {
      name_of[it->second] = name;
      continue;
    }
    // Whole on this process.
    if (tensor.is_contiguous()) {
      fill(name, 0, tensor.detach().view({-1}));
    } else {
      at::Tensor flat = at::empty({tensor.numel()}, tensor.options().requires_grad(false));
      fill(name, 0, flat);
      tensor.detach().copy_(flat.view(tensor.sizes()));
    }
  }
  if (shards == nullptr) return;
  for (const ShardPiece& piece :
       shard_pieces(shards->reducer(), shards->rank(), shards->world_size())) {
    fill(name_of.at(piece.parameter), piece.offset,
         shards->parameter_shard(piece.bucket).narrow(0, piece.shard_offset, piece.numel));
  }
}

}  // namespace accelerate::sharding
