#include "sharding/sharded_state_items.h"

#include <optional>
#include <utility>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "accelerate/common/errors.h"
#include "accelerate/nn/tensor_parallel.h"
#include "checkpoint/checkpoint_archives.h"
#include "checkpoint/optimizer_state.h"
#include "sharding/model_state_files.h"
#include "sharding/tensor_parallel_state.h"
#include "sharding/zero_optimizer.h"

namespace accelerate::sharding {
namespace {

using checkpoint::CheckpointFiles;
using checkpoint::ItemContext;

class ShardedModelItem : public checkpoint::CheckpointItem {
 public:
  ShardedModelItem(torch::nn::Module& model, std::size_t index, NamedTensors weights,
                   ModelShards& shards, bool in_pieces,
                   std::function<std::unique_ptr<checkpoint::WeightGroups>()> groups)
      : model_(model),
        index_(index),
        weights_(std::move(weights)),
        shards_(shards),
        in_pieces_(in_pieces),
        groups_(std::move(groups)) {}

  void write(const ItemContext& context) override {
    const CheckpointFiles& files = context.files;
    if (in_pieces_) {
      // Each process its pieces, read from its shards (no collective);
      // under hybrid sharding one machine's processes (one copy).
      if (!context.writes_shards) return;
      const std::string path = files.model_piece(index_, context.shard_rank);
      save_model_pieces(model_, shards_, context.shard_rank, context.shard_world_size, path,
                        context.shard_rank == 0 ? files.model_pieces_index(index_) : "");
      context.written(path);
      return;
    }
    const std::string path = files.model(index_);
    if (auto groups = groups_ ? groups_() : nullptr) {
      // Every process takes part in each group's gather, even after the
      // main process failed to write.
      std::vector<checkpoint::FileContents> contents;
      if (context.main_process()) contents.push_back({path, weights_, {{"format", "pt"}}});
      const std::string failure =
          checkpoint::write_by_groups(contents, *groups, context.main_process());
      if (!failure.empty()) throw Error(failure);
    } else if (context.main_process()) {
      save_safetensors(path, weights_, {{"format", "pt"}});
    }
    if (context.main_process()) context.written(path);
  }

  void describe(CheckpointMetadata& metadata) const override {
    if (in_pieces_) metadata.sharded_models.push_back(static_cast<int64_t>(index_));
  }

  void check(const ItemContext& context) override {
    // Pieces or one file, each process reading only its elements.
    const CheckpointFiles& files = context.files;
    const std::size_t index = index_;
    state_files_ = checkpoint::lists_index(context.metadata->sharded_models, index_)
                       ? ModelStateFiles::from_index(
                             files.model_pieces_index(index),
                             [files, index](int k) { return files.model_piece(index, k); })
                       : ModelStateFiles::from_file(files.model(index));
    state_files_->check(model_);
  }

  void apply(const ItemContext& context) override {
    (void)context;
    state_files_->load_into(model_, &shards_);
    shards_.gather_parameters();  // the buffers that are whole
  }

 private:
  torch::nn::Module& model_;
  std::size_t index_;
  NamedTensors weights_;
  ModelShards& shards_;
  bool in_pieces_;
  std::function<std::unique_ptr<checkpoint::WeightGroups>()> groups_;
  std::optional<ModelStateFiles> state_files_;
};

class ShardedOptimizerItem : public checkpoint::CheckpointItem {
 public:
  ShardedOptimizerItem(torch::optim::Optimizer& optimizer, std::size_t index,
                       ShardedOptimizer& shards, FindTensorParallelPart find_part)
      : optimizer_(optimizer), index_(index), shards_(shards), find_part_(std::move(find_part)) {}

  void write(const ItemContext& context) override {
    if (!context.writes_shards) return;  // another machine's copy
    const OptimizerShardFiles files{context.files, index_, context.tensor_parallel_size};
    const int t = context.tensor_parallel_rank;
    if (context.shard_rank == 0) {
      // How the per-process files cut the optimizer's parameters.
      checkpoint::write_text_file(
          files.manifest(t), shards_.layout().manifest(context.shard_world_size, splits(context)));
    }
    const std::string archive = files.archive(t, context.shard_rank);
    checkpoint::save_optimizer_state(optimizer_, archive, CheckpointFiles::tensors_beside(archive),
                                     [&](const std::string& path) { context.written(path); });
  }

  void describe(CheckpointMetadata& metadata) const override {
    metadata.sharded_optimizers.push_back(static_cast<int64_t>(index_));
  }

  void check(const ItemContext& context) override {
    if (!checkpoint::lists_index(context.metadata->sharded_optimizers, index_)) {
      throw Error("checkpoint " + context.files.folder() + " holds the whole state of optimizer " +
                  std::to_string(index_) +
                  " but this Accelerator shards it (ZeRO stage 1 or 2); resume without ZeRO, "
                  "or from a checkpoint saved with it");
    }
    files_.emplace(
        OptimizerShardFiles{context.files, index_, context.saved_tensor_parallel_size()});
    // Another tp: every parameter's state assembled from all tp ranks' files.
    across_tp_ = files_->saved_tp != context.tensor_parallel_size;
    if (across_tp_) {
      for (int t = 0; t < files_->saved_tp; ++t) files_->check_manifest_rank(t);
      return;
    }
    // Another number of processes: read through the layout, each saved
    // shard checked when it is applied, before anything changes.
    resharded_ = context.saved_shard_world() != context.shard_world_size;
    const int t = context.tensor_parallel_rank;
    if (resharded_) return;
    shards_.layout().check_manifest(files_->manifest(t));
    pending_.emplace(optimizer_, files_->archive(t, context.shard_rank));
  }

  void apply(const ItemContext& context) override {
    const OptimizerShardFiles files = *files_;
    const int t = context.tensor_parallel_rank;
    if (across_tp_) {
      // Inside load_state's guard the parameters are whole.
      std::vector<std::vector<at::Tensor>> parameters;
      for (const auto& model : shards_.layout().models()) parameters.push_back(model.parameters);
      WholeOptimizerState whole =
          files.load_whole(optimizer_, parameters, context.saved_shard_world());
      if (find_part_) keep_tensor_parallel_parts(whole, parameters, find_part_);
      load_whole_into(whole, shards_);
    } else if (resharded_) {
      shards_.load_resharded(context.saved_shard_world(), files.manifest(t),
                             [files, t](int k) { return files.archive(t, k); });
    } else {
      pending_->apply();
    }
  }

 private:
  // The manifest's tensor-parallel section: which of the layout's
  // parameters are parts, and of what.
  TensorParallelSplits splits(const ItemContext& context) const {
    TensorParallelSplits out{context.tensor_parallel_size, context.tensor_parallel_rank, {}};
    if (!find_part_ || out.size == 1) return out;
    const auto& models = shards_.layout().models();
    for (std::size_t m = 0; m < models.size(); ++m) {
      for (std::size_t j = 0; j < models[m].parameters.size(); ++j) {
        const at::Tensor& parameter = models[m].parameters[j];
        if (const TensorParallelPart* part = find_part_(parameter)) {
          const int64_t dim = part->dim < 0 ? part->dim + parameter.dim() : part->dim;
          out.splits.push_back({m, j, dim, part->blocks, part->whole_length});
        }
      }
    }
    return out;
  }

  torch::optim::Optimizer& optimizer_;
  std::size_t index_;
  ShardedOptimizer& shards_;
  FindTensorParallelPart find_part_;  // null: nothing split
  std::optional<OptimizerShardFiles> files_;
  bool across_tp_ = false;
  bool resharded_ = false;
  std::optional<checkpoint::PendingOptimizerState> pending_;
};

}  // namespace

std::unique_ptr<checkpoint::CheckpointItem> sharded_model_item(
    torch::nn::Module& model, std::size_t index, NamedTensors weights, ModelShards& shards,
    bool in_pieces, std::function<std::unique_ptr<checkpoint::WeightGroups>()> groups) {
  return std::make_unique<ShardedModelItem>(model, index, std::move(weights), shards, in_pieces,
                                            std::move(groups));
}

std::unique_ptr<checkpoint::CheckpointItem> sharded_optimizer_item(
    torch::optim::Optimizer& optimizer, std::size_t index, ShardedOptimizer& shards,
    FindTensorParallelPart find_part) {
  return std::make_unique<ShardedOptimizerItem>(optimizer, index, shards, std::move(find_part));
}

}  // namespace accelerate::sharding
