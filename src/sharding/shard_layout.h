// Where the parameters an optimizer steps lie in their models' gradient
// buckets, and which elements of each bucket a process owns for a given
// number of processes: the arithmetic ShardedOptimizer builds its runs from,
// and what loading ZeRO optimizer state saved on another number of
// processes needs (the old and new shards cut the same buckets at other
// places). The bucket layout depends on the parameters and the bucket caps,
// not on the number of processes. Internal to the library.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include "accelerate/parallel/gradient_reducer.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace accelerate::sharding {

// How one parameter of a layout (by model and index) is split over the
// tensor-parallel ranks of the job that saved it: TensorParallelPart's
// dim, blocks and whole_length.
struct ParameterSplit {
  std::size_t model = 0;
  std::size_t index = 0;
  std::int64_t dim = 0;
  std::int64_t blocks = 1;
  std::int64_t whole_length = 0;
};
// A manifest's tensor-parallel section: the saving process's tp rank among
// `size`, and the parameters split (the others are whole on every rank).
struct TensorParallelSplits {
  int size = 1;
  int rank = 0;
  std::vector<ParameterSplit> splits;
};

class ShardLayout {
 public:
  struct Bucket {
    std::vector<std::size_t> parameters;  // indices into Model::parameters, in buffer order
    std::vector<std::int64_t> offsets;    // where each starts in the bucket
    std::int64_t numel = 0;               // unpadded
    // Each parameter's length as the layout was made: a checkpoint reads the
    // layout while tensor-parallel parts are whole.
    std::vector<std::int64_t> numels;
  };
  struct Model {
    std::vector<at::Tensor> parameters;
    std::vector<Bucket> buckets;
  };
  // Consecutive elements of one bucket shard that belong to one group.
  struct Run {
    std::size_t model = 0;
    std::size_t bucket = 0;
    std::int64_t begin = 0;  // in the bucket
    std::int64_t numel = 0;
    std::size_t group = 0;
  };
  // Where a synced parameter lies.
  struct Location {
    std::size_t model = 0;
    std::size_t bucket = 0;
    std::int64_t offset = 0;
    std::size_t group = 0;
  };

  // `optimizer`'s groups as the program built them (whole parameters).
  ShardLayout(const torch::optim::Optimizer& optimizer, std::vector<Model> models);

  // A model's layout as its reducer has it.
  static Model from_reducer(const GradientReducer& reducer);

  const std::vector<Model>& models() const { return models_; }
  // Bucket b's length padded to a multiple of `world`, and a shard's length.
  static std::int64_t padded(std::int64_t numel, int world) {
    return (numel + world - 1) / world * world;
  }
  // Process `rank`'s runs when `world` processes share the buckets, in
  // (model, bucket, position) order: the order its optimizer holds them.
  std::vector<Run> runs_for(int rank, int world) const;
  // Per group, the optimizer's parameters no model syncs (frozen ones, or of
  // unprepared models): kept whole, before the runs, in group order.
  const std::vector<std::vector<at::Tensor>>& unsynced() const { return unsynced_; }
  std::optional<Location> locate(const at::Tensor& parameter) const;

  // The partition manifest a checkpoint keeps beside per-process optimizer
  // files (JSON: the number of processes, and per model and bucket its
  // length and each parameter's index, offset, length and optimizer group),
  // and the check
  // that a saved one describes this layout: Error naming `path` and the
  // first difference (the layout follows the model and bucket_cap_mb).
  // At tensor parallelism the manifest has a section for `tensor_parallel`
  // (the layout is of this rank's parts).
  std::string manifest(int world, const TensorParallelSplits& tensor_parallel = {}) const;
  void check_manifest(const std::string& path) const;

 private:
  std::function<int(std::size_t, std::size_t)> group_index()
      const;  // (model, index) -> group or -1
  std::vector<Model> models_;
  std::map<std::pair<std::size_t, std::size_t>, std::size_t> group_of_;  // (model, index) -> group
  std::unordered_map<const c10::TensorImpl*, Location> locations_;  // the optimizer's synced ones
  std::vector<std::vector<at::Tensor>> unsynced_;
};

// The tensor-parallel section of the manifest at `path` (size 1 where it
// has none); Error naming the path where it is malformed.
TensorParallelSplits manifest_splits(const std::string& path);

// The layout and optimizer groups the manifest at `path` describes, over
// `parameters` (per model, all of its parameters in order): the buckets as
// the saving job had them, whatever this job's bucket caps or units would
// make. Error naming the path where the models or any length differ.
struct SavedLayout {
  std::vector<ShardLayout::Model> models;
  std::vector<std::vector<int>> groups;  // [model][index]: its group; -1: not stepped
};
SavedLayout saved_layout(const std::string& path, std::vector<std::vector<at::Tensor>> parameters);
// The parameters of each of the prepared `modules` that holds some of
// `optimizer`'s (in prepare() order): the models a ZeRO manifest lists.
std::vector<std::vector<at::Tensor>> parameters_of_models(
    const torch::optim::Optimizer& optimizer, const std::vector<torch::nn::Module*>& modules);

// Whether any of `parameters` is in `optimizer`'s groups (by identity).
bool shares_parameters(const torch::optim::Optimizer& optimizer,
                       const std::vector<at::Tensor>& parameters);

// A tensor of `target` that receives saved state: a run of this process's
// shard, or a whole parameter, at `begin` of its bucket.
struct StatePiece {
  std::size_t model = 0;
  std::size_t bucket = 0;
  std::int64_t begin = 0;
  at::Tensor tensor;
};

// Loads an optimizer saved sharded by `saved_world` processes (rank k's
// archive at archive_of(k)) into `target`, whose synced parameters are
// `pieces` and whose other parameters are layout.unsynced(): every file is
// read and checked first, then every piece gets its elements' state from
// the saved shards that hold them, and the groups their options. Built-in
// optimizers only (Error otherwise).
// (load_sharded_state checks `manifest_path` first.)
void load_sharded_state(const ShardLayout& layout, int saved_world,
                        const std::string& manifest_path,
                        const std::function<std::string(int)>& archive_of,
                        torch::optim::Optimizer& target, const std::vector<StatePiece>& pieces);

// The same into an optimizer that is not sharded here (one process, or no
// ZeRO): each of its parameters gets its state assembled from the saved
// shards, through the buckets the manifest describes (the saving job's, so
// any bucket caps and ZeRO stage here), of the prepared `modules`.
void load_sharded_state_whole(torch::optim::Optimizer& optimizer,
                              const std::vector<torch::nn::Module*>& modules, int saved_world,
                              const std::string& manifest_path,
                              const std::function<std::string(int)>& archive_of);

}  // namespace accelerate::sharding
