#include "checkpoint/whole_state_items.h"

#include <filesystem>
#include <optional>
#include <utility>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "accelerate/checkpoint/model_saving.h"
#include "accelerate/common/errors.h"
#include "checkpoint/optimizer_state.h"
#include "sharding/model_state_files.h"
#include "sharding/shard_layout.h"
#include "sharding/tensor_parallel_state.h"

namespace accelerate::checkpoint {

namespace {

class WholeModelItem : public CheckpointItem {
 public:
  WholeModelItem(torch::nn::Module& model, std::size_t index, NamedTensors weights,
                 std::function<void()> loaded)
      : model_(model), index_(index), weights_(std::move(weights)), loaded_(std::move(loaded)) {}

  void write(const ItemContext& context) override {
    if (!context.main_process()) return;
    const std::string path = context.files.model(index_);
    save_safetensors(path, weights_, {{"format", "pt"}});
    context.written(path);
  }

  void check(const ItemContext& context) override {
    const CheckpointFiles& files = context.files;
    if (lists_index(context.metadata->sharded_models, index_)) {
      // A ZeRO-3 job's pieces: each tensor assembled from them.
      const std::size_t index = index_;
      pieces_ = sharding::ModelStateFiles::from_index(
          files.model_pieces_index(index),
          [files, index](int k) { return files.model_piece(index, k); });
      pieces_->check(model_);
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
    if (pieces_) {
      pieces_->load_into(model_, nullptr);
    } else {
      load_model(model_, context.files.model(index_), /*strict=*/true);
    }
    if (loaded_) loaded_();
  }

 private:
  torch::nn::Module& model_;
  std::size_t index_;
  NamedTensors weights_;
  std::function<void()> loaded_;
  std::optional<sharding::ModelStateFiles> pieces_;
};

class WholeOptimizerItem : public CheckpointItem {
 public:
  WholeOptimizerItem(torch::optim::Optimizer& optimizer, std::size_t index,
                     std::vector<torch::nn::Module*> models)
      : optimizer_(optimizer), index_(index), models_(std::move(models)) {}

  void write(const ItemContext& context) override {
    if (!context.main_process()) return;
    const std::string archive = context.files.optimizer(index_);
    save_optimizer_state(optimizer_, archive, CheckpointFiles::tensors_beside(archive),
                         [&](const std::string& path) { context.written(path); });
  }

  void check(const ItemContext& context) override {
    if (!lists_index(context.metadata->sharded_optimizers, index_)) {
      pending_.emplace(optimizer_, context.files.optimizer(index_));
      return;
    }
    // Saved per process by ZeRO: each parameter's state assembled from the
    // shards when applied (each saved shard checked before anything
    // changes), across the saving job's tensor-parallel ranks where it had
    // them.
    shards_.emplace(
        sharding::OptimizerShardFiles{context.files, index_, context.saved_tensor_parallel_size()});
    for (int t = 0; t < shards_->saved_tp; ++t) shards_->check_manifest_rank(t);
  }

  void apply(const ItemContext& context) override {
    if (pending_) {
      pending_->apply();
      return;
    }
    const sharding::OptimizerShardFiles files = *shards_;
    if (files.saved_tp == 1) {
      sharding::load_sharded_state_whole(optimizer_, models_, context.saved_shard_world(),
                                         files.manifest(0),
                                         [files](int k) { return files.archive(0, k); });
      return;
    }
    const auto parameters = sharding::parameters_of_models(optimizer_, models_);
    sharding::load_whole_into(files.load_whole(optimizer_, parameters, context.saved_shard_world()),
                              optimizer_, parameters);
  }

 private:
  torch::optim::Optimizer& optimizer_;
  std::size_t index_;
  std::vector<torch::nn::Module*> models_;
  std::optional<PendingOptimizerState> pending_;         // saved whole
  std::optional<sharding::OptimizerShardFiles> shards_;  // saved per process
};

}  // namespace

std::unique_ptr<CheckpointItem> whole_model_item(torch::nn::Module& model, std::size_t index,
                                                 NamedTensors weights,
                                                 std::function<void()> loaded) {
  return std::make_unique<WholeModelItem>(model, index, std::move(weights), std::move(loaded));
}

std::unique_ptr<CheckpointItem> whole_optimizer_item(torch::optim::Optimizer& optimizer,
                                                     std::size_t index,
                                                     std::vector<torch::nn::Module*> models) {
  return std::make_unique<WholeOptimizerItem>(optimizer, index, std::move(models));
}

}  // namespace accelerate::checkpoint
