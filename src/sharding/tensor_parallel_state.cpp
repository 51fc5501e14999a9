#include "sharding/tensor_parallel_state.h"

#include <map>
#include <utility>

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include "accelerate/common/errors.h"
#include "accelerate/nn/tensor_parallel.h"
#include "checkpoint/optimizer_kinds.h"
#include "checkpoint/optimizer_reshard.h"
#include "compat/optim_compat.h"
#include "sharding/shard_layout.h"
#include "sharding/zero_optimizer.h"

namespace accelerate::sharding {
namespace {

using Index = std::pair<std::size_t, std::size_t>;  // (model, parameter)

// One tensor-parallel rank's saved state, over tensors shaped as its parts.
struct RankState {
  std::map<Index, ParameterSplit> splits;
  std::vector<std::vector<at::Tensor>> parts;  // [model][index]
  std::vector<std::vector<int>> groups;        // [model][index]; -1: not stepped
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

// The shape of rank `rank`'s part of `whole` when `size` ranks split it as `split` says.
std::vector<int64_t> part_shape(const at::Tensor& whole, const ParameterSplit& split, int size,
                                int rank, const std::string& path) {
  if (split.dim >= whole.dim() || whole.size(split.dim) != split.whole_length) {
    throw Error(path + ": parameter " + std::to_string(split.index) + " of model " +
                std::to_string(split.model) + " was split along dimension " +
                std::to_string(split.dim) + " of " + std::to_string(split.whole_length) +
                ", which this model's parameter of shape " + std::to_string(whole.dim()) +
                "-D does not have");
  }
  std::vector<int64_t> shape = whole.sizes().vec();
  const int64_t block = split.whole_length / split.blocks;
  shape[split.dim] = split.blocks * tensor_parallel_range(block, size, rank).length;
  return shape;
}

RankState load_rank(const torch::optim::Optimizer& like,
                    const std::vector<std::vector<at::Tensor>>& parameters, int saved_tp,
                    int tp_rank, int saved_world, const std::string& manifest,
                    const std::function<std::string(int)>& archive_of) {
  RankState state;
  const TensorParallelSplits saved = saved_rank_splits(manifest, saved_tp, tp_rank);
  for (const ParameterSplit& split : saved.splits) state.splits[{split.model, split.index}] = split;
  for (std::size_t m = 0; m < parameters.size(); ++m) {
    state.parts.emplace_back();
    for (std::size_t j = 0; j < parameters[m].size(); ++j) {
      const at::Tensor& whole = parameters[m][j];
      auto split = state.splits.find({m, j});
      state.parts.back().push_back(
          split == state.splits.end()
              ? at::zeros_like(whole).requires_grad_(false)
              : at::zeros(part_shape(whole, split->second, saved_tp, tp_rank, manifest),
                          whole.options().requires_grad(false)));
    }
  }
  SavedLayout layout = saved_layout(manifest, state.parts);
  std::vector<std::vector<at::Tensor>> by_group(like.param_groups().size());
  for (std::size_t m = 0; m < layout.groups.size(); ++m) {
    for (std::size_t j = 0; j < layout.groups[m].size(); ++j) {
      const int group = layout.groups[m][j];
      if (group < 0) continue;
      if (static_cast<std::size_t>(group) >= by_group.size())
        throw Error(manifest + ": optimizer group " + std::to_string(group) + " is not this one's");
      by_group[group].push_back(state.parts[m][j]);
    }
  }
  state.optimizer = checkpoint::make_optimizer_like(like, by_group);
  state.groups = layout.groups;
  const ShardLayout shards(*state.optimizer, std::move(layout.models));
  std::vector<StatePiece> pieces;
  for (const auto& group : state.optimizer->param_groups()) {
    for (const at::Tensor& part : group.params()) {
      const auto where = shards.locate(part);
      pieces.push_back(StatePiece{where->model, where->bucket, where->offset, part});
    }
  }
  load_sharded_state(shards, saved_world, manifest, archive_of, *state.optimizer, pieces);
  return state;
}

// The whole tensor whose parts, in rank order, are `parts`, split as `split` says.
at::Tensor join_parts(const std::vector<at::Tensor>& parts, const ParameterSplit& split) {
  std::vector<at::Tensor> pieces;
  for (int64_t b = 0; b < split.blocks; ++b) {
    for (const at::Tensor& part : parts) {
      const int64_t length = part.size(split.dim) / split.blocks;
      pieces.push_back(part.narrow(split.dim, b * length, length));
    }
  }
  return at::cat(pieces, split.dim);
}

}  // namespace

TensorParallelSplits saved_rank_splits(const std::string& manifest, int saved_tp, int tp_rank) {
  TensorParallelSplits saved = manifest_splits(manifest);
  if (saved.size != saved_tp || saved.rank != tp_rank) {
    throw Error(manifest + ": saved by tensor-parallel rank " + std::to_string(saved.rank) +
                " of " + std::to_string(saved.size) + ", not rank " + std::to_string(tp_rank) +
                " of " + std::to_string(saved_tp));
  }
  return saved;
}

WholeOptimizerState load_whole_state(const torch::optim::Optimizer& like,
                                     const std::vector<std::vector<at::Tensor>>& parameters,
                                     int saved_tp, int saved_world,
                                     const std::function<std::string(int)>& manifest_of,
                                     const std::function<std::string(int, int)>& archive_of) {
  const checkpoint::Kind* kind = checkpoint::kind_of(like);
  if (kind == nullptr)
    throw Error("ZeRO state across tensor-parallel sizes: not a built-in optimizer");
  std::vector<RankState> ranks;
  for (int t = 0; t < saved_tp; ++t) {
    ranks.push_back(load_rank(like, parameters, saved_tp, t, saved_world, manifest_of(t),
                              [&archive_of, t](int k) { return archive_of(t, k); }));
    if (ranks.back().splits.size() != ranks.front().splits.size()) {
      throw Error(manifest_of(t) + ": splits " + std::to_string(ranks.back().splits.size()) +
                  " parameters, tensor-parallel rank 0 " +
                  std::to_string(ranks.front().splits.size()));
    }
  }
  WholeOptimizerState out;
  std::vector<std::vector<at::Tensor>> by_group(like.param_groups().size());
  for (std::size_t m = 0; m < parameters.size(); ++m) {
    out.parameters.emplace_back(parameters[m].size());
    for (std::size_t j = 0; j < parameters[m].size(); ++j) {
      const int group = ranks.front().groups[m][j];
      if (group < 0) continue;
      out.parameters[m][j] = at::zeros_like(parameters[m][j]).requires_grad_(false);
      by_group[group].push_back(out.parameters[m][j]);
    }
  }
  out.optimizer = checkpoint::make_optimizer_like(like, by_group);
  checkpoint::copy_group_options(*ranks.front().optimizer, *out.optimizer);
  c10::NoGradGuard no_grad;
  for (std::size_t m = 0; m < parameters.size(); ++m) {
    for (std::size_t j = 0; j < parameters[m].size(); ++j) {
      if (!out.parameters[m][j].defined()) continue;
      auto state = compat::take_param_state(*ranks.front().optimizer, ranks.front().parts[m][j]);
      if (!state) continue;  // never stepped
      auto split = ranks.front().splits.find({m, j});
      if (split != ranks.front().splits.end()) {
        std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> others;
        for (std::size_t t = 1; t < ranks.size(); ++t) {
          others.push_back(compat::take_param_state(*ranks[t].optimizer, ranks[t].parts[m][j]));
          if (!others.back())
            throw Error(manifest_of(static_cast<int>(t)) +
                        ": no state for a parameter rank 0 has state of");
        }
        for (const checkpoint::StateTensor& slot : kind->tensors) {
          at::Tensor& first = slot.slot(*state);
          if (!first.defined() || first.dim() != parameters[m][j].dim()) continue;
          std::vector<at::Tensor> parts{first};
          for (auto& other : others) parts.push_back(slot.slot(*other));
          first = join_parts(parts, split->second);
        }
      }
      compat::set_param_state(*out.optimizer, out.parameters[m][j], std::move(state));
    }
  }
  return out;
}

void keep_tensor_parallel_parts(WholeOptimizerState& state,
                                const std::vector<std::vector<at::Tensor>>& parameters,
                                const FindTensorParallelPart& find_part) {
  const checkpoint::Kind* kind = checkpoint::kind_of(*state.optimizer);
  c10::NoGradGuard no_grad;
  for (std::size_t m = 0; m < state.parameters.size(); ++m) {
    for (std::size_t j = 0; j < state.parameters[m].size(); ++j) {
      at::Tensor& whole = state.parameters[m][j];
      const TensorParallelPart* split =
          whole.defined() ? find_part(parameters.at(m).at(j)) : nullptr;
      if (split == nullptr) continue;
      if (auto slots = compat::take_param_state(*state.optimizer, whole)) {
        for (const checkpoint::StateTensor& slot : kind->tensors) {
          at::Tensor& tensor = slot.slot(*slots);
          if (tensor.defined() && tensor.dim() == whole.dim())
            tensor = part_of_whole(tensor, *split);
        }
        compat::set_param_state(*state.optimizer, whole, std::move(slots));
      }
      whole.set_data(part_of_whole(whole, *split));
    }
  }
}

std::string OptimizerShardFiles::manifest(int tp_rank) const {
  return files.optimizer_partition(index,
                                   saved_tp > 1 ? std::optional<int>(tp_rank) : std::nullopt);
}

std::string OptimizerShardFiles::archive(int tp_rank, int rank) const {
  return files.optimizer_shard(index, rank,
                               saved_tp > 1 ? std::optional<int>(tp_rank) : std::nullopt);
}

void OptimizerShardFiles::check_manifest_rank(int tp_rank) const {
  saved_rank_splits(manifest(tp_rank), saved_tp, tp_rank);
}

WholeOptimizerState OptimizerShardFiles::load_whole(
    const torch::optim::Optimizer& like, const std::vector<std::vector<at::Tensor>>& parameters,
    int saved_world) const {
  const OptimizerShardFiles self = *this;
  return load_whole_state(
      like, parameters, saved_tp, saved_world, [self](int t) { return self.manifest(t); },
      [self](int t, int k) { return self.archive(t, k); });
}

void load_whole_into(const WholeOptimizerState& source, torch::optim::Optimizer& target,
                     const std::vector<std::vector<at::Tensor>>& parameters) {
  checkpoint::copy_group_options(*source.optimizer, target);
  for (std::size_t m = 0; m < source.parameters.size(); ++m) {
    for (std::size_t j = 0; j < source.parameters[m].size(); ++j) {
      const at::Tensor& from = source.parameters[m][j];
      if (!from.defined()) continue;
      const at::Tensor& to = parameters.at(m).at(j);
      if (to.numel() != from.numel()) {
        throw Error("load_state: parameter " + std::to_string(j) + " of model " +
                    std::to_string(m) + " has " + std::to_string(to.numel()) +
                    " elements, its saved state " + std::to_string(from.numel()));
      }
      compat::take_param_state(target, to);
      checkpoint::copy_state_slice(*source.optimizer, from, 0, target, to, 0, from.numel());
    }
  }
}

void load_whole_into(const WholeOptimizerState& source, ShardedOptimizer& target) {
  target.load_parameter_states(*source.optimizer, source.parameters);
}

}  // namespace accelerate::sharding
