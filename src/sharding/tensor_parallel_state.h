// ZeRO optimizer state saved at tensor parallelism and loaded at another tp
// (or by an optimizer that is not sharded): each tensor-parallel rank saved
// its shards of its parts (optimizer[_i]_tp<t>_rank<r>.bin, with the
// partition manifest optimizer[_i]_tp<t>_partition.json naming the split
// parameters); a load assembles every parameter's whole state from all of
// them, and each process takes what it steps. Internal to the library.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

#include "checkpoint/checkpoint_files.h"
#include "parallel/tensor_parallel_lookup.h"
#include "sharding/shard_layout.h"

namespace accelerate::sharding {

class ShardedOptimizer;

// manifest_splits of the manifest tp rank `tp_rank` of `saved_tp` saved;
// Error naming it where another rank or tp size saved it.
TensorParallelSplits saved_rank_splits(const std::string& manifest, int saved_tp, int tp_rank);

// An optimizer of the target's built-in type over one whole tensor per
// model parameter it steps, holding that parameter's saved state and the
// saved group options.
struct WholeOptimizerState {
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::vector<std::vector<at::Tensor>> parameters;  // [model][index]; undefined: not stepped
};

// The state saved by `saved_tp` tensor-parallel ranks, each sharded over
// `saved_world` processes (rank t's manifest at manifest_of(t), its process
// k's archive at archive_of(t, k)), over zero tensors like `parameters`
// (this job's models' parameters as the manifests list them, whole: split
// parts gathered) and of `like`'s type. Every file is read and checked
// before anything is returned; Error naming the file where one is missing,
// was saved by another tp rank, or does not fit. Holds the whole state in
// memory.
WholeOptimizerState load_whole_state(const torch::optim::Optimizer& like,
                                     const std::vector<std::vector<at::Tensor>>& parameters,
                                     int saved_tp, int saved_world,
                                     const std::function<std::string(int)>& manifest_of,
                                     const std::function<std::string(int, int)>& archive_of);

// Each of `state`'s whole parameters whose counterpart among this job's
// `parameters` (the same [model][index]) is a tensor-parallel part (by
// `find_part`) becomes this rank's part of it, with its state: what a ZeRO
// optimizer at tp loads from state saved at another tp.
void keep_tensor_parallel_parts(WholeOptimizerState& state,
                                const std::vector<std::vector<at::Tensor>>& parameters,
                                const FindTensorParallelPart& find_part);

// The files of optimizer `index`'s shards in a checkpoint saved at tp
// `saved_tp`: tp rank t's manifest and its process k's archive (the names
// carry t only where saved_tp is above 1).
struct OptimizerShardFiles {
  checkpoint::CheckpointFiles files;
  std::size_t index = 0;
  int saved_tp = 1;

  std::string manifest(int tp_rank) const;
  std::string archive(int tp_rank, int rank) const;
  // Error naming the manifest where it is missing or another rank saved it.
  void check_manifest_rank(int tp_rank) const;
  // load_whole_state of these files, each tp rank sharded over `saved_world`.
  WholeOptimizerState load_whole(const torch::optim::Optimizer& like,
                                 const std::vector<std::vector<at::Tensor>>& parameters,
                                 int saved_world) const;
};

// `source`'s state into `target` (not sharded), whose parameter [m][j] is
// parameters[m][j], shaped as source's: the saved state replaces any it had.
void load_whole_into(const WholeOptimizerState& source, torch::optim::Optimizer& target,
                     const std::vector<std::vector<at::Tensor>>& parameters);

// `source`'s state into this process's shard of `target`; source's
// parameter [m][j] is shaped as this process's part of it (every element
// of the layout's parameter j of model m).
void load_whole_into(const WholeOptimizerState& source, ShardedOptimizer& target);

}  // namespace accelerate::sharding
