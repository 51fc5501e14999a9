#include "accelerator/state_items.h"

#include <algorithm>
#include <filesystem>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include "accelerate/errors.h"
#include "accelerate/model_saving.h"
#include "accelerator/tensor_parallel_split.h"
#include "checkpoint/checkpoint_archives.h"
#include "checkpoint/model_streaming.h"
#include "checkpoint/optimizer_state.h"
#include "parallel/parallel_engine.h"
#include "sharding/model_state_files.h"
#include "sharding/shard_layout.h"
#include "sharding/tensor_parallel_state.h"
#include "sharding/zero_optimizer.h"

namespace accelerate {
namespace {

using checkpoint::CheckpointFiles;
using checkpoint::ItemContext;

bool lists(const std::vector<int64_t>& indices, std::size_t index) {
  return std::count(indices.begin(), indices.end(), static_cast<int64_t>(index)) > 0;
}

class ModelItem : public checkpoint::CheckpointItem {
 public:
  ModelItem(torch::nn::Module& model, std::size_t index, ParallelEngine& engine,
            NamedTensors weights, bool by_groups)
      : model_(model),
        index_(index),
        engine_(engine),
        weights_(std::move(weights)),
        by_groups_(by_groups) {}

  void write(const ItemContext& context) override {
    const CheckpointFiles& files = context.files;
    if (const sharding::ModelShards* shards = engine_.saved_in_pieces(model_)) {
      // Each process its pieces, read from its shards (no collective);
      // under hybrid sharding one machine's processes (one copy).
      if (!context.writes_shards) return;
      const std::string path = files.model_piece(index_, context.shard_rank);
      sharding::save_model_pieces(model_, *shards, context.shard_rank, context.shard_world_size,
                                  path,
                                  context.shard_rank == 0 ? files.model_pieces_index(index_) : "");
      context.written(path);
      return;
    }
    const std::string path = files.model(index_);
    if (auto groups = by_groups_ ? engine_.weight_groups(model_) : nullptr) {
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
    if (engine_.saved_in_pieces(model_) != nullptr)
      metadata.sharded_models.push_back(static_cast<int64_t>(index_));
  }

  void check(const ItemContext& context) override {
    const CheckpointFiles& files = context.files;
    const bool saved_in_pieces = lists(context.metadata->sharded_models, index_);
    // Sharded weights load each process's elements only; pieces load anywhere.
    if (saved_in_pieces || engine_.model_shards(model_) != nullptr) {
      const std::size_t index = index_;
      state_files_ = saved_in_pieces
                         ? sharding::ModelStateFiles::from_index(
                               files.model_pieces_index(index),
                               [files, index](int k) { return files.model_piece(index, k); })
                         : sharding::ModelStateFiles::from_file(files.model(index));
      state_files_->check(model_);
      return;
    }
    const std::string path = files.model(index_);
    if (!std::filesystem::is_regular_file(path))
      throw Error("checkpoint file " + path + " is missing");
    SafetensorsReader reader(path);
    for (const auto& [name, tensor] : module_state_dict(model_)) {
      if (!reader.contains(name)) throw Error(path + ": tensor '" + name + "' is missing");
      const std::string mismatch = reader.mismatch(name, tensor);
      if (!mismatch.empty()) throw Error(mismatch);
    }
  }

  void apply(const ItemContext& context) override {
    if (!state_files_) {
      load_model(model_, context.files.model(index_), /*strict=*/true);
      engine_.whole_weights_written(model_);
      return;
    }
    sharding::ModelShards* shards = engine_.model_shards(model_);
    state_files_->load_into(model_, shards);
    if (shards != nullptr) shards->gather_parameters();  // the buffers that are whole
  }

 private:
  torch::nn::Module& model_;
  std::size_t index_;
  ParallelEngine& engine_;
  NamedTensors weights_;
  bool by_groups_;
  std::optional<sharding::ModelStateFiles> state_files_;  // loaded by element ranges
};

class OptimizerItem : public checkpoint::CheckpointItem {
 public:
  OptimizerItem(torch::optim::Optimizer& optimizer, std::size_t index, ParallelEngine& engine,
                std::vector<torch::nn::Module*> models, const TensorParallelParts* parts)
      : optimizer_(optimizer),
        index_(index),
        shards_(engine.optimizer_shards(optimizer)),
        models_(std::move(models)),
        parts_(parts) {}

  void write(const ItemContext& context) override {
    const CheckpointFiles& files = context.files;
    if (shards_ == nullptr && !context.main_process()) return;
    if (shards_ != nullptr && !context.writes_shards) return;  // another machine's copy
    // ZeRO at tensor parallelism: each tp rank's shards of its parts.
    const std::optional<int> tp =
        split_rank(context.tensor_parallel_size, context.tensor_parallel_rank);
    if (shards_ != nullptr && context.shard_rank == 0) {
      // How the per-process files cut the optimizer's parameters.
      checkpoint::write_text_file(
          files.optimizer_partition(index_, tp),
          shards_->layout().manifest(context.shard_world_size, splits(context)));
    }
    const std::string archive = shards_ != nullptr
                                    ? files.optimizer_shard(index_, context.shard_rank, tp)
                                    : files.optimizer(index_);
    checkpoint::save_optimizer_state(optimizer_, archive, CheckpointFiles::tensors_beside(archive),
                                     [&](const std::string& path) { context.written(path); });
  }

  void describe(CheckpointMetadata& metadata) const override {
    if (shards_ != nullptr) metadata.sharded_optimizers.push_back(static_cast<int64_t>(index_));
  }

  void check(const ItemContext& context) override {
    const CheckpointFiles& files = context.files;
    const bool saved_sharded = lists(context.metadata->sharded_optimizers, index_);
    if (!saved_sharded && shards_ != nullptr) {
      throw Error("checkpoint " + files.folder() + " holds the whole state of optimizer " +
                  std::to_string(index_) +
                  " but this Accelerator shards it (ZeRO stage 1 or 2); resume without ZeRO, "
                  "or from a checkpoint saved with it");
    }
    saved_tp_ = saved_sharded ? context.saved_tensor_parallel_size() : 1;
    // Shards of other parts (another tp), or of parts loaded whole: every
    // parameter's state assembled from all tp ranks' files when applied.
    across_tp_ = saved_sharded && (saved_tp_ != context.tensor_parallel_size ||
                                   (saved_tp_ > 1 && shards_ == nullptr));
    if (across_tp_) {
      for (int t = 0; t < saved_tp_; ++t)
        sharding::saved_rank_splits(manifest(files, t), saved_tp_, t);
      return;
    }
    // Saved per process and read through the layout, each saved shard
    // checked when it is applied, before anything changes.
    resharded_ = saved_sharded &&
                 (context.saved_shard_world() != context.shard_world_size || shards_ == nullptr);
    if (resharded_) return;
    const int t = context.tensor_parallel_rank;
    if (shards_ != nullptr) shards_->layout().check_manifest(manifest(files, t));
    pending_.emplace(optimizer_, shards_ != nullptr ? archive(files, t, context.shard_rank)
                                                    : files.optimizer(index_));
  }

  void apply(const ItemContext& context) override {
    const CheckpointFiles files = context.files;
    if (across_tp_) {
      load_across_tensor_parallel(files, context.saved_shard_world());
    } else if (!resharded_) {
      pending_->apply();
    } else if (shards_ != nullptr) {
      const int t = context.tensor_parallel_rank;
      shards_->load_resharded(context.saved_shard_world(), manifest(files, t),
                              [this, files, t](int k) { return archive(files, t, k); });
    } else {
      sharding::load_sharded_state_whole(optimizer_, models_, context.saved_shard_world(),
                                         manifest(files, 0),
                                         [this, files](int k) { return archive(files, 0, k); });
    }
  }

 private:
  // The tp rank a file name carries: none where one process group holds
  // the whole parameters.
  static std::optional<int> split_rank(int tp_size, int tp_rank) {
    return tp_size > 1 ? std::optional<int>(tp_rank) : std::nullopt;
  }
  std::string manifest(const CheckpointFiles& files, int tp_rank) const {
    return files.optimizer_partition(index_, split_rank(saved_tp_, tp_rank));
  }
  std::string archive(const CheckpointFiles& files, int tp_rank, int shard_rank) const {
    return files.optimizer_shard(index_, shard_rank, split_rank(saved_tp_, tp_rank));
  }

  // The manifest's tensor-parallel section: which of the layout's
  // parameters are parts, and of what.
  sharding::TensorParallelSplits splits(const ItemContext& context) const {
    sharding::TensorParallelSplits out{
        context.tensor_parallel_size, context.tensor_parallel_rank, {}};
    if (parts_ == nullptr || out.size == 1) return out;
    const auto& models = shards_->layout().models();
    for (std::size_t m = 0; m < models.size(); ++m) {
      for (std::size_t j = 0; j < models[m].parameters.size(); ++j) {
        const at::Tensor& parameter = models[m].parameters[j];
        if (const TensorParallelPart* part = parts_->find(parameter)) {
          const int64_t dim = part->dim < 0 ? part->dim + parameter.dim() : part->dim;
          out.splits.push_back({m, j, dim, part->blocks, part->whole_length});
        }
      }
    }
    return out;
  }

  void load_across_tensor_parallel(const CheckpointFiles& files, int saved_shard_world) {
    std::vector<std::vector<at::Tensor>> parameters;
    if (shards_ != nullptr) {
      for (const auto& model : shards_->layout().models()) parameters.push_back(model.parameters);
    } else {
      parameters = sharding::parameters_of_models(optimizer_, models_);
    }
    // Inside load_state's guard the parameters are whole.
    sharding::WholeOptimizerState whole = sharding::load_whole_state(
        optimizer_, parameters, saved_tp_, saved_shard_world,
        [this, files](int t) { return manifest(files, t); },
        [this, files](int t, int k) { return archive(files, t, k); });
    if (shards_ == nullptr) {
      sharding::load_whole_into(whole, optimizer_, parameters);
      return;
    }
    if (parts_ != nullptr) keep_tensor_parallel_parts(whole, parameters, *parts_);
    sharding::load_whole_into(whole, *shards_);
  }

  torch::optim::Optimizer& optimizer_;
  std::size_t index_;
  sharding::ShardedOptimizer* shards_;  // null: whole on every process
  std::vector<torch::nn::Module*> models_;
  const TensorParallelParts* parts_;  // null: nothing split
  int saved_tp_ = 1;                  // load_state: the saving job's tp, for its files
  bool across_tp_ = false;
  bool resharded_ = false;
  std::optional<checkpoint::PendingOptimizerState> pending_;
};

std::string loader_key(std::size_t index, const char* field) {
  return "dataloader_" + std::to_string(index) + "_" + field;
}

class RandomStatesItem : public checkpoint::CheckpointItem {
 public:
  explicit RandomStatesItem(std::vector<DataLoaderBase*> loaders) : loaders_(std::move(loaders)) {}

  void write(const ItemContext& context) override {
    const std::string path = context.files.random_states(context.rank);
    checkpoint::save_archive(path, [&](torch::serialize::OutputArchive& archive) {
      checkpoint::save_rng_states(archive);
      for (std::size_t i = 0; i < loaders_.size(); ++i) {
        const DataLoaderPosition position = loaders_[i]->position();
        checkpoint::write_int(archive, loader_key(i, "epoch"), position.epoch);
        checkpoint::write_int(archive, loader_key(i, "batches_yielded"),
                              static_cast<int64_t>(position.batches_yielded));
        checkpoint::write_int(archive, loader_key(i, "shuffle_seed"),
                              static_cast<int64_t>(position.shuffle_seed));
        checkpoint::write_int(archive, loader_key(i, "global_batch"),
                              static_cast<int64_t>(loaders_[i]->sharding().global_batch_size()));
      }
    });
    context.written(path);
  }

  void check(const ItemContext& context) override {
    for (auto* loader : loaders_) {
      if (loader->is_iterating())
        throw Error("load_state: a prepared data loader is mid-iteration");
    }
    const std::string path = context.files.random_states(source(context));
    if (!std::filesystem::is_regular_file(path))
      throw Error("checkpoint file " + path + " is missing");
  }

  void apply(const ItemContext& context) override {
    checkpoint::load_archive(
        context.files.random_states(source(context)), [&](torch::serialize::InputArchive& archive) {
          if (source(context) == context.rank) checkpoint::load_rng_states(archive);
          for (std::size_t i = 0; i < loaders_.size(); ++i) {
            DataLoaderPosition position;
            position.epoch = checkpoint::read_int(archive, loader_key(i, "epoch"));
            // The same samples consumed in all, in global batches of this job
            // (other data-parallel sizes and batch sizes; a tensor-parallel
            // group reads the same batches).
            const auto yielded = static_cast<uint64_t>(
                checkpoint::read_int(archive, loader_key(i, "batches_yielded")));
            position.batches_yielded = yielded * saved_global_batch(archive, i, context) /
                                       loaders_[i]->sharding().global_batch_size();
            position.shuffle_seed =
                static_cast<uint64_t>(checkpoint::read_int(archive, loader_key(i, "shuffle_seed")));
            loaders_[i]->restore_position(position);
          }
        });
  }

 private:
  // The samples of one global batch of loader i when it was saved; older
  // checkpoints hold none, and had the same per-process batch at other
  // process counts.
  uint64_t saved_global_batch(torch::serialize::InputArchive& archive, std::size_t i,
                              const ItemContext& context) const {
    c10::IValue value;
    if (archive.try_read(loader_key(i, "global_batch"), value) && value.isInt())
      return static_cast<uint64_t>(value.toInt());
    return loaders_[i]->sharding().process_batch_size() *
           static_cast<uint64_t>(context.saved_world());
  }

  // The process whose file this one restores from.
  static int source(const ItemContext& context) {
    return std::min(context.rank, context.saved_world() - 1);
  }
  std::vector<DataLoaderBase*> loaders_;
};

}  // namespace

std::unique_ptr<checkpoint::CheckpointItem> model_item(torch::nn::Module& model, std::size_t index,
                                                       ParallelEngine& engine, NamedTensors weights,
                                                       bool by_groups) {
  return std::make_unique<ModelItem>(model, index, engine, std::move(weights), by_groups);
}

std::unique_ptr<checkpoint::CheckpointItem> optimizer_item(torch::optim::Optimizer& optimizer,
                                                           std::size_t index,
                                                           ParallelEngine& engine,
                                                           std::vector<torch::nn::Module*> models,
                                                           const TensorParallelParts* parts) {
  return std::make_unique<OptimizerItem>(optimizer, index, engine, std::move(models), parts);
}

std::unique_ptr<checkpoint::CheckpointItem> random_states_item(
    std::vector<DataLoaderBase*> loaders) {
  return std::make_unique<RandomStatesItem>(std::move(loaders));
}

}  // namespace accelerate
