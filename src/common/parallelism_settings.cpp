// Accelerate 1.x's ParallelismConfig sizes, as its launcher passes them to
// the ranks (PARALLELISM_CONFIG_*).
// dp_replicate_size x dp_shard_size processes: shard groups of dp_shard_size
// consecutive ranks, replicated dp_replicate_size times (hybrid sharding,
// docs/sharding.md); tp_size and cp_size are read so that a value above 1 is
// refused rather than ignored.
#include "common/settings.h"

namespace accelerate::settings {

const Setting<bool> kUseParallelismConfig{
    {"ACCELERATE_USE_PARALLELISM_CONFIG", "--use_parallelism_config / parallelism_config",
     kBoolExpectation, "false",
     "read the parallelism sizes (PARALLELISM_CONFIG_*): data parallel replicas x shards"},
    false,
    parse_bool,
    format_bool};

const Setting<int> kParallelismDpReplicateSize{
    {"PARALLELISM_CONFIG_DP_REPLICATE_SIZE",
     "--parallelism_config_dp_replicate_size / "
     "parallelism_config.parallelism_config_dp_replicate_size",
     kCountExpectation, "1", "copies of the model's shards (hybrid sharding across them)"},
    1,
    parse_count,
    format_int};

const Setting<int> kParallelismDpShardSize{
    {"PARALLELISM_CONFIG_DP_SHARD_SIZE",
     "--parallelism_config_dp_shard_size / parallelism_config.parallelism_config_dp_shard_size",
     kCountExpectation, "1", "processes each copy of the model is sharded over (with FSDP)"},
    1,
    parse_count,
    format_int};

const Setting<int> kParallelismTpSize{
    {"PARALLELISM_CONFIG_TP_SIZE",
     "--parallelism_config_tp_size / parallelism_config.parallelism_config_tp_size",
     kCountExpectation, "1", "tensor parallelism: only 1 (accelerate-cpp has none)"},
    1,
    parse_count,
    format_int};

const Setting<int> kParallelismCpSize{
    {"PARALLELISM_CONFIG_CP_SIZE",
     "--parallelism_config_cp_size / parallelism_config.parallelism_config_cp_size",
     kCountExpectation, "1", "context parallelism: only 1 (accelerate-cpp has none)"},
    1,
    parse_count,
    format_int};

}  // namespace accelerate::settings
