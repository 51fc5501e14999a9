// accelerate-merge-optimizer CHECKPOINT_DIR INDEX SAVED_WORLD OUTPUT_DIR:
// the helper `accelerate merge-weights --include_optimizer` runs for each
// ZeRO-sharded optimizer. The `accelerate` executable links no LibTorch, and
// a shard's archive (optimizer_rank<r>.bin) is a LibTorch archive, so this
// separate program (found next to `accelerate`, or in libexec once
// installed, like the sanity program) reads the SAVED_WORLD shards of
// optimizer INDEX and writes them as one shard of a one-process job:
// OUTPUT_DIR/optimizer[_i]_rank0.bin, its .safetensors (every state element
// in one file) and optimizer[_i]_partition.json with "world_size": 1. That is
// what load_state reads on one process (and reshards on any other number).
//
// No model code is needed: the partition manifest gives every stepped
// parameter's length, bucket and group, which is all the runs of a shard
// depend on; the parameters stand in as flat tensors of those lengths.
// Errors: one line on stderr, exit code 1.
#include <torch/torch.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/common/errors.h"
#include "accelerate/schedule/adafactor.h"
#include "checkpoint/checkpoint_archives.h"
#include "checkpoint/checkpoint_files.h"
#include "checkpoint/optimizer_kinds.h"
#include "checkpoint/optimizer_reshard.h"
#include "checkpoint/optimizer_state.h"
#include "sharding/shard_layout.h"

namespace {

namespace fs = std::filesystem;
using accelerate::Error;
using accelerate::checkpoint::CheckpointFiles;
using accelerate::sharding::ShardLayout;

// Default options of the saved optimizer's type: the saved ones replace
// them when the shards are read, so only the type matters here.
std::shared_ptr<torch::optim::OptimizerOptions> options_for(const std::string& kind) {
  using namespace torch::optim;
  if (kind == "SGD") return std::make_shared<SGDOptions>(0.0);
  if (kind == "Adam") return std::make_shared<AdamOptions>();
  if (kind == "AdamW") return std::make_shared<AdamWOptions>();
  if (kind == "Adagrad") return std::make_shared<AdagradOptions>();
  if (kind == "RMSprop") return std::make_shared<RMSpropOptions>();
  if (kind == "Adafactor") return std::make_shared<accelerate::AdafactorOptions>();
  return nullptr;
}

const accelerate::checkpoint::Kind& kind_named(const std::string& name, const std::string& file) {
  for (const auto& kind : accelerate::checkpoint::kinds()) {
    if (name == kind.name) return kind;
  }
  throw Error(file + " holds a torch::optim::" + name +
              ", which merge-weights cannot merge (built-in optimizers only)");
}

nlohmann::json read_manifest(const std::string& path) {
  const std::string text =
      accelerate::checkpoint::read_checkpoint_file(path, "the ZeRO partition manifest");
  try {
    return nlohmann::json::parse(text).at("models");
  } catch (const nlohmann::json::exception&) {
    throw Error(path + ": not a ZeRO partition manifest");
  }
}

void merge(const std::string& folder, std::size_t index, int saved_world,
           const std::string& output) {
  const CheckpointFiles in(folder), out(output);
  const std::string first = in.optimizer_shard(index, 0);
  std::string type;
  int64_t group_count = 0;
  accelerate::checkpoint::load_archive(first, [&](torch::serialize::InputArchive& archive) {
    type = accelerate::checkpoint::read_string(archive, "optimizer");
    group_count = accelerate::checkpoint::read_int(archive, "param_groups/size");
  });
  const auto& kind = kind_named(type, first);
  // The state keeps the dtype it was saved in (the stand-ins' dtype is what
  // the shards' tensors are converted to when read).
  at::ScalarType dtype = at::kFloat;
  {
    accelerate::SafetensorsReader reader(CheckpointFiles::tensors_beside(first));
    const auto names = reader.names();
    if (!names.empty()) dtype = reader.dtype(names.front());
  }

  // Stand-ins for the parameters the manifest lists, grouped as saved.
  const std::string manifest_path = in.optimizer_partition(index);
  const nlohmann::json saved = read_manifest(manifest_path);
  std::vector<ShardLayout::Model> models;
  std::vector<std::vector<at::Tensor>> groups(static_cast<std::size_t>(group_count));
  try {
    for (const auto& model_json : saved) {
      ShardLayout::Model model;
      for (const auto& bucket_json : model_json.at("buckets")) {
        ShardLayout::Bucket bucket;
        bucket.numel = bucket_json.at("numel").get<int64_t>();
        for (const auto& entry : bucket_json.at("parameters")) {
          const auto parameter = entry.at(0).get<std::size_t>();
          const auto group = entry.size() > 3 ? entry.at(3).get<int64_t>() : 0;
          if (model.parameters.size() <= parameter) model.parameters.resize(parameter + 1);
          model.parameters[parameter] = at::zeros({entry.at(2).get<int64_t>()}, dtype);
          if (group >= group_count) {
            throw Error(manifest_path + ": parameter group " + std::to_string(group) + " but " +
                        first + " has " + std::to_string(group_count));
          }
          if (group >= 0)
            groups[static_cast<std::size_t>(group)].push_back(model.parameters[parameter]);
          bucket.parameters.push_back(parameter);
          bucket.offsets.push_back(entry.at(1).get<int64_t>());
          bucket.numels.push_back(entry.at(2).get<int64_t>());
        }
        model.buckets.push_back(std::move(bucket));
      }
      for (auto& parameter : model.parameters) {
        if (!parameter.defined()) parameter = at::zeros({0}, dtype);  // not in any bucket
      }
      models.push_back(std::move(model));
    }
  } catch (const nlohmann::json::exception&) {
    throw Error(manifest_path + ": not a ZeRO partition manifest");
  }
  std::vector<torch::optim::OptimizerParamGroup> whole_groups;
  for (auto& group : groups) {
    whole_groups.emplace_back(group, options_for(type)->clone());
  }
  const auto whole = kind.make_optimizer(std::move(whole_groups));
  const ShardLayout layout(*whole, std::move(models));

  // One process's shard: every bucket whole, cut into runs by group.
  std::vector<std::vector<at::Tensor>> params(static_cast<std::size_t>(group_count));
  std::vector<accelerate::sharding::StatePiece> pieces;
  for (const auto& run : layout.runs_for(0, 1)) {
    at::Tensor tensor = at::zeros({run.numel}, dtype);
    params[run.group].push_back(tensor);
    pieces.push_back({run.model, run.bucket, run.begin, tensor});
  }
  const auto target = accelerate::checkpoint::make_optimizer_like(*whole, params);
  accelerate::sharding::load_sharded_state(
      layout, saved_world, manifest_path, [&](int rank) { return in.optimizer_shard(index, rank); },
      *target, pieces);
  const std::string archive = out.optimizer_shard(index, 0);
  accelerate::checkpoint::save_optimizer_state(
      *target, archive, CheckpointFiles::tensors_beside(archive), [](const std::string&) {});
  accelerate::checkpoint::write_text_file(out.optimizer_partition(index), layout.manifest(1));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: accelerate-merge-optimizer CHECKPOINT_DIR INDEX SAVED_WORLD OUTPUT_DIR "
                 "(run by accelerate merge-weights --include_optimizer)\n";
    return 2;
  }
  try {
    merge(argv[1], std::stoul(argv[2]), std::stoi(argv[3]), argv[4]);
  } catch (const std::exception& error) {
    std::string line = error.what();
    for (char& c : line) {
      if (c == '\n') c = ' ';  // one line
    }
    std::cerr << line << "\n";
    return 1;
  }
  return 0;
}
