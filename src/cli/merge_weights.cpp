#include "cli/merge_weights.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>

#include "accelerate/common/errors.h"
#include "accelerate/detail/checkpoint_metadata.h"
#include "checkpoint/checkpoint_files.h"
#include "checkpoint/float_narrowing.h"
#include "checkpoint/model_pieces_index.h"
#include "checkpoint/safetensors_header.h"
#include "checkpoint/safetensors_io.h"
#include "checkpoint/safetensors_layout.h"
#include "checkpoint/safetensors_model_files.h"
#include "checkpoint/safetensors_sharding.h"
#include "cli/merge_checkpoint.h"

namespace accelerate::cli {
namespace {

namespace fs = std::filesystem;
using checkpoint::CheckpointFiles;

// Bytes [offset, offset + size) of input file `file`.
struct Extent {
  std::size_t file = 0;
  uint64_t offset = 0, size = 0;
};

// One tensor of the model: where its bytes are, in element order.
struct SourceTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<Extent> extents;
};

struct Source {
  std::vector<std::string> paths;     // input files
  std::vector<SourceTensor> tensors;  // state-dict order
};

bool is_floating(const std::string& dtype) {
  return dtype == "F64" || dtype == "F32" || dtype == "F16" || dtype == "BF16";
}

std::string model_name(std::size_t model) { return "model " + std::to_string(model); }

// Whole: model[_i].safetensors, tensors in the file's order (the state-dict
// order among tensors of one element size, which is all save_model's
// sharding can tell apart when every tensor has the same element size).
Source whole_source(const CheckpointFiles& files, std::size_t model) {
  Source source;
  const std::string path = files.model(model);
  std::error_code error;
  if (!fs::is_regular_file(path, error)) {
    throw Error("checkpoint file " + path + " is missing (the weights of " + model_name(model) +
                ")");
  }
  const safetensors::Header header = safetensors::read_header(path);
  source.paths.push_back(path);
  for (const auto& entry : header.tensors) {
    source.tensors.push_back({entry.name,
                              entry.dtype,
                              entry.shape,
                              {{0, header.data_offset + entry.begin, entry.end - entry.begin}}});
  }
  return source;
}

// In pieces: the index and every process's file, each piece checked.
Source pieces_source(const CheckpointFiles& files, std::size_t model, int world_size) {
  const std::string index_path = files.model_pieces_index(model);
  const auto index = checkpoint::ModelPiecesIndex::read(index_path);
  if (index.world_size != world_size) {
    throw Error(index_path + ": written by " + std::to_string(index.world_size) +
                " processes but the checkpoint by " + std::to_string(world_size) +
                " (a file of another save)");
  }
  Source source;
  std::vector<safetensors::Header> headers;
  std::vector<std::map<std::string, const safetensors::TensorEntry*>> entries(world_size);
  for (int rank = 0; rank < world_size; ++rank) {
    const std::string path = files.model_piece(model, rank);
    std::error_code error;
    if (!fs::is_regular_file(path, error)) {
      throw Error("checkpoint file " + path + " is missing (process " + std::to_string(rank) +
                  "'s pieces of " + model_name(model) + ")");
    }
    headers.push_back(safetensors::read_header(path));
    source.paths.push_back(path);
  }
  for (int rank = 0; rank < world_size; ++rank) {
    for (const auto& entry : headers[rank].tensors) entries[rank][entry.name] = &entry;
  }
  const auto lookup = [&](int rank, const std::string& name) {
    std::optional<safetensors::TensorEntry> found;
    auto it = entries[rank].find(name);
    if (it != entries[rank].end()) found = *it->second;
    return found;
  };
  const auto file_of = [&](int rank) { return source.paths[rank]; };
  for (const auto& tensor : index.tensors) {
    SourceTensor merged{tensor.name, tensor.dtype, tensor.shape, {}};
    for (const auto& piece : checkpoint::checked_pieces(tensor, index_path, lookup, file_of)) {
      const safetensors::TensorEntry& entry = *entries[piece.rank].at(tensor.name);
      merged.extents.push_back({static_cast<std::size_t>(piece.rank),
                                headers[piece.rank].data_offset + entry.begin,
                                entry.end - entry.begin});
    }
    source.tensors.push_back(std::move(merged));
  }
  return source;
}

Source read_source(const MergeOptions& options) {
  const CheckpointMetadata metadata = read_checkpoint_metadata(options.checkpoint_dir);
  if (static_cast<int64_t>(options.model) >= metadata.models) {
    throw Error("checkpoint " + options.checkpoint_dir + " holds " +
                std::to_string(metadata.models) + " model(s); there is no " +
                model_name(options.model));
  }
  const CheckpointFiles files(options.checkpoint_dir);
  const auto& pieces = metadata.sharded_models;
  if (std::find(pieces.begin(), pieces.end(), static_cast<int64_t>(options.model)) !=
      pieces.end()) {
    return pieces_source(files, options.model, metadata.shards_saved_by());
  }
  return whole_source(files, options.model);
}

std::string written_dtype(const SourceTensor& tensor, const std::string& dtype) {
  return !dtype.empty() && is_floating(tensor.dtype) ? dtype : tensor.dtype;
}

float element_as_float(const char* at, const std::string& dtype) {
  if (dtype == "F32") {
    float value;
    std::memcpy(&value, at, 4);
    return value;
  }
  if (dtype == "F64") {
    double value;
    std::memcpy(&value, at, 8);
    return static_cast<float>(value);  // as LibTorch: through float
  }
  uint16_t bits;
  std::memcpy(&bits, at, 2);
  return dtype == "BF16" ? safetensors::float_from_bfloat16(bits)
                         : safetensors::float_from_half(bits);
}

// Copies a tensor's extents to `out`, converting elements when the dtypes
// differ; the buffers are the only memory it takes.
class Streamer {
 public:
  explicit Streamer(const std::vector<std::string>& paths) {
    for (const auto& path : paths) inputs_.push_back(safetensors::File::open_read(path));
    in_.resize(kChunk);
  }
  void copy(const SourceTensor& tensor, const std::string& to, safetensors::File& out) {
    const std::size_t from_size = safetensors::dtype_size(tensor.dtype);
    const std::size_t to_size = safetensors::dtype_size(to);
    for (const Extent& extent : tensor.extents) {
      for (uint64_t done = 0; done < extent.size;) {
        const uint64_t size = std::min<uint64_t>(kChunk, extent.size - done);
        inputs_[extent.file].read_at(in_.data(), size, extent.offset + done);
        done += size;
        if (to == tensor.dtype) {
          out.write_all(in_.data(), size);
          continue;
        }
        const uint64_t elements = size / from_size;
        converted_.resize(elements * to_size);
        for (uint64_t i = 0; i < elements; ++i) {
          const float value = element_as_float(in_.data() + i * from_size, tensor.dtype);
          const uint16_t bits =
              to == "BF16" ? safetensors::bfloat16_bits(value) : safetensors::half_bits(value);
          std::memcpy(converted_.data() + i * 2, &bits, 2);
        }
        out.write_all(converted_.data(), converted_.size());
      }
    }
  }

 private:
  // A multiple of every element size, so no element straddles two chunks.
  static constexpr uint64_t kChunk = uint64_t{8} << 20;
  std::vector<safetensors::File> inputs_;
  std::vector<char> in_, converted_;
};

// `output_dir` may be replaced only when it is absent or an empty folder.
void check_output(const MergeOptions& options) {
  std::error_code error;
  const fs::path output(options.output_dir);
  if (fs::exists(output, error) &&
      !(fs::is_directory(output, error) && fs::is_empty(output, error))) {
    throw Error(
        "output folder " + options.output_dir +
        " exists and is not empty; merge-weights writes a new folder (remove it or name another)");
  }
  if (options.remove_checkpoint_dir) {
    const fs::path checkpoint = fs::weakly_canonical(options.checkpoint_dir, error);
    const fs::path target = fs::weakly_canonical(output, error);
    const auto mismatch =
        std::mismatch(checkpoint.begin(), checkpoint.end(), target.begin(), target.end());
    if (mismatch.first == checkpoint.end()) {
      throw Error("--remove_checkpoint_dir would delete the output: " + options.output_dir +
                  " is inside " + options.checkpoint_dir);
    }
  }
}

// A fresh hidden folder beside `output` (same filesystem, so the final
// rename is atomic).
fs::path make_staging(const fs::path& output) {
  const fs::path parent = output.has_parent_path() ? output.parent_path() : fs::path(".");
  std::error_code error;
  fs::create_directories(parent, error);
  const fs::path staging =
      parent / ("." + output.filename().string() + ".merge-weights-" + std::to_string(::getpid()));
  fs::remove_all(staging, error);
  if (!fs::create_directory(staging, error)) {
    throw Error("cannot create folder " + staging.string() + ": " + error.message());
  }
  return staging;
}

// `file_name`: the name of an unsplit output ("": save_model's).
MergeResult write_output(const Source& source, const MergeOptions& options, const fs::path& staging,
                         const std::string& file_name = "") {
  const auto& format = model_files::kSafetensors;
  std::vector<safetensors::TensorSpec> specs;
  std::vector<uint64_t> sizes;
  for (const auto& tensor : source.tensors) {
    specs.push_back({tensor.name, written_dtype(tensor, options.dtype), tensor.shape});
    uint64_t elements = 1;
    for (int64_t dim : tensor.shape) elements *= static_cast<uint64_t>(dim);
    sizes.push_back(elements * safetensors::dtype_size(specs.back().dtype));
  }
  const auto shards = safetensors::plan_shards(sizes, options.max_shard_size);
  MergeResult result;
  result.tensors = specs.size();
  safetensors::ShardIndex index;
  Streamer streamer(source.paths);
  for (std::size_t s = 0; s < shards.size(); ++s) {
    const std::string name =
        shards.size() == 1
            ? (file_name.empty() ? format.file() : file_name)
            : safetensors::shard_file_name(format.stem, s, shards.size(), format.extension);
    std::vector<safetensors::TensorSpec> shard_specs;
    for (std::size_t i : shards[s]) {
      shard_specs.push_back(specs[i]);
      index.weight_map[specs[i].name] = name;
      index.total_size += sizes[i];
    }
    const std::string path = (fs::path(options.output_dir) / name).string();
    const auto layout = safetensors::layout_file(path, shard_specs, {{"format", "pt"}});
    safetensors::File out = safetensors::File::open_write((staging / name).string());
    out.write_all(layout.prefix.data(), layout.prefix.size());
    for (std::size_t k : layout.order) {
      const std::size_t i = shards[s][k];
      streamer.copy(source.tensors[i], specs[i].dtype, out);
      result.bytes += sizes[i];
    }
    out.close();
    result.files.push_back(name);
  }
  if (shards.size() > 1) {
    const std::string text = safetensors::index_json(index);
    safetensors::File out = safetensors::File::open_write((staging / format.index()).string());
    out.write_all(text.data(), text.size());
    out.close();
    result.files.push_back(format.index());
  }
  return result;
}

// Writes the output into a staging folder by `write` and renames it into
// place (removing the staging folder on any error), then removes the
// checkpoint when asked.
MergeResult write_staged(const MergeOptions& options,
                         const std::function<MergeResult(const fs::path&)>& write) {
  check_output(options);
  const fs::path output(options.output_dir);
  const fs::path staging = make_staging(output);
  MergeResult result;
  try {
    result = write(staging);
    if (std::rename(staging.c_str(), output.c_str()) != 0) {
      throw Error("cannot rename " + staging.string() + " to " + options.output_dir + ": " +
                  std::strerror(errno));
    }
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    throw;
  }
  if (options.remove_checkpoint_dir) {
    std::error_code error;
    fs::remove_all(options.checkpoint_dir, error);
    if (error) {
      throw Error("merged into " + options.output_dir + " but could not remove " +
                  options.checkpoint_dir + ": " + error.message());
    }
  }
  return result;
}

// --include_optimizer: a checkpoint one process resumes from, every model
// whole (one file each, as save_state names them) and the optimizers merged.
MergeResult merge_into_checkpoint(const MergeOptions& options) {
  const CheckpointMetadata metadata = read_checkpoint_metadata(options.checkpoint_dir);
  std::vector<Source> sources;
  for (int64_t i = 0; i < metadata.models; ++i) {
    MergeOptions one = options;
    one.model = static_cast<std::size_t>(i);
    sources.push_back(read_source(one));
  }
  const std::string helper = check_optimizer_files(options.checkpoint_dir, metadata);
  return write_staged(options, [&](const fs::path& staging) {
    MergeResult result;
    MergeOptions whole = options;
    whole.max_shard_size = UINT64_MAX;
    for (std::size_t i = 0; i < sources.size(); ++i) {
      const std::string name =
          fs::path(CheckpointFiles(staging.string()).model(i)).filename().string();
      const MergeResult one = write_output(sources[i], whole, staging, name);
      result.files.insert(result.files.end(), one.files.begin(), one.files.end());
      result.tensors += one.tensors;
      result.bytes += one.bytes;
    }
    write_checkpoint_rest(options.checkpoint_dir, metadata, helper, staging.string());
    result.files.push_back(kCheckpointMetadataFile);
    return result;
  });
}

}  // namespace

MergeResult merge_weights(const MergeOptions& options) {
  if (options.include_optimizer) return merge_into_checkpoint(options);
  const Source source = read_source(options);
  return write_staged(
      options, [&](const fs::path& staging) { return write_output(source, options, staging); });
}

}  // namespace accelerate::cli
