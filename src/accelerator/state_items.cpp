#include "accelerator/state_items.h"

#include <algorithm>
#include <filesystem>

#include <torch/serialize/archive.h>

#include "accelerate/common/errors.h"
#include "checkpoint/checkpoint_archives.h"

namespace accelerate {
namespace {

using checkpoint::ItemContext;

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

std::unique_ptr<checkpoint::CheckpointItem> random_states_item(
    std::vector<DataLoaderBase*> loaders) {
  return std::make_unique<RandomStatesItem>(std::move(loaders));
}

}  // namespace accelerate
