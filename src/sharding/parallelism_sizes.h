// Accelerate 1.x's ParallelismConfig sizes as a job reads them: data
// parallel replicas x shards (dp_replicate_size x dp_shard_size), from the
// PARALLELISM_CONFIG_* values `accelerate launch` gives (flags, or the
// config file's parallelism_config section). With FSDP, dp_shard_size below
// the job's processes is hybrid sharding: shard groups of dp_shard_size
// consecutive ranks, replicated dp_replicate_size times (docs/sharding.md).
// LibTorch-free: the launcher judges the sizes before any process starts,
// with the same function the ranks use.
#pragma once

#include <optional>
#include <string>

#include "common/setting_values.h"

namespace accelerate::sharding {

struct ParallelismSizes {
  int dp_replicate = 1;
  int dp_shard = 1;
  // Sequence-parallel group size (docs/sequence-parallel.md).
  int sp = 1;
  // Tensor-parallel group size: the innermost dimension, so a group's ranks
  // are consecutive and share a machine (docs/tensor-parallel.md).
  int tp = 1;
  // Megatron's sequence parallelism between the tensor-parallel layers.
  bool tp_sequence_parallel = false;
};

// The sizes when ACCELERATE_USE_PARALLELISM_CONFIG is true, else nullopt.
// Like Accelerate, sizes left at 1 everywhere mean data parallelism over
// every process (world_size / (sp_size x tp_size) replicas with sequence
// or tensor parallelism).
// ConfigError (one line, naming where each deciding value was written) for
// cp_size above 1, a product (with sp_size and tp_size) other than
// `world_size`, dp_shard_size above 1 without FSDP (`fsdp` false: nothing
// would shard), and, with FSDP, dp_shard_size 1 with several replicas (that
// is data parallelism: Accelerate refuses it too).
std::optional<ParallelismSizes> parallelism_sizes(const settings::SettingValues& values,
                                                  int world_size, bool fsdp);

// The tensor-parallel size the job runs with: `sizes`' tp_size, or a
// DeepSpeed file's tensor_parallel.autotp_size (`autotp_size`, from the file
// named `file`). ConfigError (one line, naming both) when the parallelism
// sizes are in use with another tp_size, or when autotp_size without the parallelism sizes does not
// divide the job's `world_size` processes.
int tensor_parallel_size(const std::optional<ParallelismSizes>& sizes, long long autotp_size,
                         const std::string& file, int world_size);

}  // namespace accelerate::sharding
