#include "sharding/shard_layout.h"

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "accelerate/common/errors.h"
#include "checkpoint/checkpoint_archives.h"
#include "checkpoint/optimizer_reshard.h"
#include "checkpoint/optimizer_state.h"
#include "compat/optim_compat.h"
#include "parallel/bucket_assignment.h"
#include "parallel/sharded_gradients.h"

namespace accelerate::sharding {

ShardLayout::ShardLayout(const torch::optim::Optimizer& optimizer, std::vector<Model> models)
    : models_(std::move(models)) {
  // Where every synced parameter lies, and its index in its model.
  std::unordered_map<const c10::TensorImpl*, std::pair<Location, std::size_t>> synced;
  for (std::size_t m = 0; m < models_.size(); ++m) {
    for (std::size_t b = 0; b < models_[m].buckets.size(); ++b) {
      const Bucket& bucket = models_[m].buckets[b];
      for (std::size_t k = 0; k < bucket.parameters.size(); ++k) {
        const at::Tensor& parameter = models_[m].parameters[bucket.parameters[k]];
        synced[parameter.unsafeGetTensorImpl()] = {Location{m, b, bucket.offsets[k], 0},
                                                   bucket.parameters[k]};
      }
    }
  }
  const auto& groups = optimizer.param_groups();
  unsynced_.resize(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (const at::Tensor& parameter : groups[g].params()) {
      auto it = synced.find(parameter.unsafeGetTensorImpl());
      if (it == synced.end()) {
        unsynced_[g].push_back(parameter);
        continue;
      }
      auto [location, index] = it->second;
      if (!group_of_.emplace(std::make_pair(location.model, index), g).second) {
        throw ConfigError("ZeRO: a parameter appears twice in the optimizer's groups");
      }
      location.group = g;
      locations_[parameter.unsafeGetTensorImpl()] = location;
    }
  }
}

ShardLayout::Model ShardLayout::from_reducer(const GradientReducer& reducer) {
  Model model{reducer.parameters(), {}};
  for (const GradientBucket& bucket : reducer.buckets()) {
    Bucket b{bucket.parameter_indices, {}, bucket.numel, {}};
    for (std::size_t index : bucket.parameter_indices) {
      b.offsets.push_back(detail::ShardedGradients::offset_in_bucket(reducer, index));
      b.numels.push_back(model.parameters[index].numel());
    }
    model.buckets.push_back(std::move(b));
  }
  return model;
}

std::vector<ShardLayout::Run> ShardLayout::runs_for(int rank, int world) const {
  std::vector<Run> runs;
  for (std::size_t m = 0; m < models_.size(); ++m) {
    for (std::size_t b = 0; b < models_[m].buckets.size(); ++b) {
      const Bucket& bucket = models_[m].buckets[b];
      const std::int64_t shard = padded(bucket.numel, world) / world;
      const std::int64_t lo = rank * shard, hi = lo + shard;
      bool open = false;  // the last run may still grow
      for (std::size_t k = 0; k < bucket.parameters.size(); ++k) {
        const std::int64_t offset = bucket.offsets[k];
        const std::int64_t begin = std::max(offset, lo);
        const std::int64_t end = std::min(offset + bucket.numels[k], hi);
        auto it = group_of_.find({m, bucket.parameters[k]});
        if (it == group_of_.end() || begin >= end) {
          open = false;
          continue;
        }
        if (open && runs.back().group == it->second &&
            runs.back().begin + runs.back().numel == begin) {
          runs.back().numel += end - begin;
          continue;
        }
        runs.push_back(Run{m, b, begin, end - begin, it->second});
        open = true;
      }
    }
  }
  return runs;
}

std::optional<ShardLayout::Location> ShardLayout::locate(const at::Tensor& parameter) const {
  auto it = locations_.find(parameter.unsafeGetTensorImpl());
  if (it == locations_.end()) return std::nullopt;
  return it->second;
}

namespace {

// Per model and bucket: its length, and each parameter's index, offset,
// length and optimizer group (-1: not stepped by the optimizer).
nlohmann::json layout_json(const std::vector<ShardLayout::Model>& models,
                           const std::function<int(std::size_t, std::size_t)>& group_of) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& model : models) {
    nlohmann::json buckets = nlohmann::json::array();
    for (const auto& bucket : model.buckets) {
      nlohmann::json parameters = nlohmann::json::array();
      for (std::size_t k = 0; k < bucket.parameters.size(); ++k) {
        parameters.push_back({bucket.parameters[k], bucket.offsets[k], bucket.numels[k],
                              group_of(&model - models.data(), bucket.parameters[k])});
      }
      buckets.push_back({{"numel", bucket.numel}, {"parameters", parameters}});
    }
    out.push_back({{"buckets", buckets}});
  }
  return out;
}

}  // namespace

std::function<int(std::size_t, std::size_t)> ShardLayout::group_index() const {
  return [this](std::size_t model, std::size_t index) {
    auto it = group_of_.find({model, index});
    return it == group_of_.end() ? -1 : static_cast<int>(it->second);
  };
}

std::string ShardLayout::manifest(int world, const TensorParallelSplits& tensor_parallel) const {
  nlohmann::json json{{"world_size", world}, {"models", layout_json(models_, group_index())}};
  if (tensor_parallel.size > 1) {
    nlohmann::json splits = nlohmann::json::array();
    for (const ParameterSplit& split : tensor_parallel.splits) {
      splits.push_back({split.model, split.index, split.dim, split.blocks, split.whole_length});
    }
    json["tensor_parallel"] = {
        {"size", tensor_parallel.size}, {"rank", tensor_parallel.rank}, {"splits", splits}};
  }
  return json.dump(1) + "\n";
}

namespace {

nlohmann::json read_manifest(const std::string& path) {
  const std::string text = checkpoint::read_checkpoint_file(path, "the ZeRO partition manifest");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    throw Error(path + ": not a ZeRO partition manifest");
  }
}

// The "models" of the partition manifest at `path`.
nlohmann::json manifest_models(const std::string& path) {
  const nlohmann::json manifest = read_manifest(path);
  if (!manifest.is_object() || !manifest.contains("models"))
    throw Error(path + ": not a ZeRO partition manifest");
  return manifest.at("models");
}

}  // namespace

TensorParallelSplits manifest_splits(const std::string& path) {
  const nlohmann::json manifest = read_manifest(path);
  TensorParallelSplits out;
  if (!manifest.is_object() || !manifest.contains("tensor_parallel")) return out;
  try {
    const nlohmann::json& section = manifest.at("tensor_parallel");
    out.size = section.at("size").get<int>();
    out.rank = section.at("rank").get<int>();
    for (const auto& entry : section.at("splits")) {
      ParameterSplit split{entry.at(0).get<std::size_t>(), entry.at(1).get<std::size_t>(),
                           entry.at(2).get<std::int64_t>(), entry.at(3).get<std::int64_t>(),
                           entry.at(4).get<std::int64_t>()};
      if (split.blocks < 1 || split.dim < 0 || split.whole_length % split.blocks != 0)
        throw Error(path + ": a tensor-parallel split with " + std::to_string(split.blocks) +
                    " blocks of " + std::to_string(split.whole_length) + " along dimension " +
                    std::to_string(split.dim));
      out.splits.push_back(split);
    }
  } catch (const nlohmann::json::exception&) {
    throw Error(path + ": a malformed tensor_parallel section");
  }
  if (out.size < 1 || out.rank < 0 || out.rank >= out.size) {
    throw Error(path + ": tensor-parallel rank " + std::to_string(out.rank) + " of " +
                std::to_string(out.size));
  }
  return out;
}

void ShardLayout::check_manifest(const std::string& path) const {
  const nlohmann::json saved = manifest_models(path);
  const nlohmann::json mine = layout_json(models_, group_index());
  if (saved == mine) return;
  std::string where = "the number of models";
  if (saved.is_array() && saved.size() == mine.size()) {
    for (std::size_t m = 0; m < mine.size(); ++m) {
      const auto& a = saved[m]["buckets"];
      const auto& b = mine[m]["buckets"];
      if (a == b) continue;
      where = "model " + std::to_string(m) + "'s buckets";
      for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        if (a[i] != b[i]) {
          where = "model " + std::to_string(m) + ", bucket " + std::to_string(i);
          break;
        }
      }
      break;
    }
  }
  throw Error(path + ": the saved ZeRO partition differs from this job's at " + where +
              " (the bucket layout follows the model, bucket_cap_mb and whether ZeRO stage 3 "
              "cuts it per unit: resume with the same, or on one process)");
}

bool shares_parameters(const torch::optim::Optimizer& optimizer,
                       const std::vector<at::Tensor>& parameters) {
  std::unordered_set<const c10::TensorImpl*> wanted;
  for (const at::Tensor& p : parameters) wanted.insert(p.unsafeGetTensorImpl());
  for (const auto& group : optimizer.param_groups()) {
    for (const at::Tensor& p : group.params()) {
      if (wanted.count(p.unsafeGetTensorImpl()) > 0) return true;
    }
  }
  return false;
}

void load_sharded_state(const ShardLayout& layout, int saved_world,
                        const std::string& manifest_path,
                        const std::function<std::string(int)>& archive_of,
                        torch::optim::Optimizer& target, const std::vector<StatePiece>& pieces) {
  layout.check_manifest(manifest_path);
  // Each saved shard in an optimizer of its own over tensors shaped like
  // that process's runs: read and checked, all of them, before anything
  // changes (this holds the whole saved state in memory at once).
  struct Saved {
    std::vector<ShardLayout::Run> runs;
    std::vector<at::Tensor> run_tensors;
    std::unique_ptr<torch::optim::Optimizer> optimizer;
  };
  std::vector<Saved> saved(static_cast<std::size_t>(saved_world));
  std::vector<checkpoint::PendingOptimizerState> pending;
  for (int k = 0; k < saved_world; ++k) {
    Saved& s = saved[k];
    s.runs = layout.runs_for(k, saved_world);
    std::vector<std::vector<at::Tensor>> params = layout.unsynced();
    for (const auto& run : s.runs) {
      const ShardLayout::Model& model = layout.models()[run.model];
      const at::Tensor& like = model.parameters[model.buckets[run.bucket].parameters.front()];
      s.run_tensors.push_back(at::zeros({run.numel}, like.options().requires_grad(false)));
      params[run.group].push_back(s.run_tensors.back());
    }
    s.optimizer = checkpoint::make_optimizer_like(target, params);
    pending.emplace_back(*s.optimizer, archive_of(k));
  }
  for (auto& p : pending) p.apply();

  // The loaded state replaces whatever the target had (an Adam step count
  // included), as a load of the whole state does.
  for (const auto& group : layout.unsynced()) {
    for (const at::Tensor& parameter : group) compat::take_param_state(target, parameter);
  }
  for (const StatePiece& piece : pieces) compat::take_param_state(target, piece.tensor);
  checkpoint::copy_group_options(*saved[0].optimizer, target);
  for (const auto& group : layout.unsynced()) {  // replicated: every rank saved the same
    for (const at::Tensor& parameter : group) {
      checkpoint::copy_state_slice(*saved[0].optimizer, parameter, 0, target, parameter, 0,
                                   parameter.numel());
    }
  }
  for (const StatePiece& piece : pieces) {
    const std::int64_t piece_end = piece.begin + piece.tensor.numel();
    for (const Saved& s : saved) {
      for (std::size_t r = 0; r < s.runs.size(); ++r) {
        const ShardLayout::Run& run = s.runs[r];
        if (run.model != piece.model || run.bucket != piece.bucket) continue;
        const std::int64_t lo = std::max(run.begin, piece.begin);
        const std::int64_t hi = std::min(run.begin + run.numel, piece_end);
        if (lo >= hi) continue;
        checkpoint::copy_state_slice(*s.optimizer, s.run_tensors[r], lo - run.begin, target,
                                     piece.tensor, lo - piece.begin, hi - lo);
      }
    }
  }
}

SavedLayout saved_layout(const std::string& path, std::vector<std::vector<at::Tensor>> parameters) {
  const nlohmann::json saved = manifest_models(path);
  SavedLayout out;
  try {
    if (saved.size() != parameters.size()) {
      throw Error(path + ": " + std::to_string(saved.size()) + " models, not this job's " +
                  std::to_string(parameters.size()));
    }
    for (std::size_t m = 0; m < parameters.size(); ++m) {
      ShardLayout::Model model{std::move(parameters[m]), {}};
      std::vector<int> groups(model.parameters.size(), -1);
      for (const auto& bucket : saved[m].at("buckets")) {
        ShardLayout::Bucket b;
        b.numel = bucket.at("numel").get<std::int64_t>();
        for (const auto& entry : bucket.at("parameters")) {
          const auto index = entry.at(0).get<std::size_t>();
          const auto numel = entry.at(2).get<std::int64_t>();
          if (index >= model.parameters.size() || model.parameters[index].numel() != numel) {
            throw Error(path + ": parameter " + std::to_string(index) + " of model " +
                        std::to_string(m) + " of the saved partition is not this model's");
          }
          b.parameters.push_back(index);
          b.offsets.push_back(entry.at(1).get<std::int64_t>());
          b.numels.push_back(numel);
          groups[index] = entry.at(3).get<int>();
        }
        model.buckets.push_back(std::move(b));
      }
      out.models.push_back(std::move(model));
      out.groups.push_back(std::move(groups));
    }
  } catch (const nlohmann::json::exception&) {
    throw Error(path + ": not a ZeRO partition manifest");
  }
  return out;
}

std::vector<std::vector<at::Tensor>> parameters_of_models(
    const torch::optim::Optimizer& optimizer, const std::vector<torch::nn::Module*>& modules) {
  std::vector<std::vector<at::Tensor>> out;
  for (torch::nn::Module* module : modules) {
    std::vector<at::Tensor> parameters = module->parameters(true);
    if (shares_parameters(optimizer, parameters)) out.push_back(std::move(parameters));
  }
  return out;
}

void load_sharded_state_whole(torch::optim::Optimizer& optimizer,
                              const std::vector<torch::nn::Module*>& modules, int saved_world,
                              const std::string& manifest_path,
                              const std::function<std::string(int)>& archive_of) {
  const ShardLayout layout(
      optimizer, saved_layout(manifest_path, parameters_of_models(optimizer, modules)).models);
  std::vector<StatePiece> pieces;
  for (const auto& group : optimizer.param_groups()) {
    for (const at::Tensor& parameter : group.params()) {
      if (auto where = layout.locate(parameter)) {
        pieces.push_back(StatePiece{where->model, where->bucket, where->offset, parameter});
      }
    }
  }
  load_sharded_state(layout, saved_world, manifest_path, archive_of, optimizer, pieces);
}

}  // namespace accelerate::sharding
