#include "sharding/parallelism_sizes.h"

#include <string>

#include "accelerate/common/errors.h"
#include "common/settings.h"

namespace accelerate::sharding {
namespace {

// " (--parallelism_config_dp_shard_size, c.yaml:4: key '...')": where the
// sizes that were given came from.
std::string size_origins(const settings::SettingValues& values) {
  std::string origins;
  for (const settings::Setting<int>* size :
       {&settings::kParallelismDpReplicateSize, &settings::kParallelismDpShardSize,
        &settings::kParallelismSpSize, &settings::kParallelismTpSize,
        &settings::kParallelismCpSize}) {
    if (auto origin = size->origin(values))
      origins += (origins.empty() ? "" : ", ") + origin->subject();
  }
  return origins.empty() ? "" : " (" + origins + ")";
}

void refuse_model_parallelism(const settings::SettingValues& values,
                              const settings::Setting<int>& size, int value, const char* what) {
  if (value == 1) return;
  throw ConfigError(size.origin(values)->describe(std::to_string(value)) + " asks for " + what +
                    ", which accelerate-cpp does not have: set it to 1");
}

}  // namespace

std::optional<ParallelismSizes> parallelism_sizes(const settings::SettingValues& values,
                                                  int world_size, bool fsdp) {
  if (!settings::kUseParallelismConfig.read_or_default(values)) return std::nullopt;
  ParallelismSizes sizes;
  sizes.dp_replicate = settings::kParallelismDpReplicateSize.read_or_default(values);
  sizes.dp_shard = settings::kParallelismDpShardSize.read_or_default(values);
  sizes.sp = settings::kParallelismSpSize.read_or_default(values);
  settings::kParallelismSpBackend.read_or_default(values);  // only "deepspeed" parses
  sizes.tp = settings::kParallelismTpSize.read_or_default(values);
  sizes.tp_sequence_parallel = settings::kParallelismTpSequenceParallel.read_or_default(values);
  const int cp = settings::kParallelismCpSize.read_or_default(values);
  refuse_model_parallelism(values, settings::kParallelismCpSize, cp, "context parallelism");
  // The model-parallel groups, as " x sp_size 2 x tp_size 2" (what is above 1).
  std::string model_sizes;
  if (sizes.sp > 1) model_sizes += " x sp_size " + std::to_string(sizes.sp);
  if (sizes.tp > 1) model_sizes += " x tp_size " + std::to_string(sizes.tp);
  // Accelerate: nothing set is data parallelism over every process (over
  // the sequence- and tensor-parallel groups with sp_size and tp_size).
  if (sizes.dp_replicate == 1 && sizes.dp_shard == 1) {
    const long long group = static_cast<long long>(sizes.sp) * sizes.tp;
    if (world_size % group != 0) {
      throw ConfigError("parallelism_config: " + model_sizes.substr(3) +
                        " does not divide the job's " + std::to_string(world_size) + " processes" +
                        size_origins(values));
    }
    sizes.dp_replicate = static_cast<int>(world_size / group);
  }
  const long long total =
      static_cast<long long>(sizes.dp_replicate) * sizes.dp_shard * sizes.sp * sizes.tp;
  if (total != world_size) {
    throw ConfigError("parallelism_config: dp_replicate_size " +
                      std::to_string(sizes.dp_replicate) + " x dp_shard_size " +
                      std::to_string(sizes.dp_shard) + model_sizes + " is " +
                      std::to_string(total) + " processes, but the job has " +
                      std::to_string(world_size) + size_origins(values));
  }
  if (sizes.dp_shard > 1 && !fsdp) {
    throw ConfigError(
        "parallelism_config: dp_shard_size " + std::to_string(sizes.dp_shard) +
        " shards the model, which needs FSDP (--use_fsdp, or distributed_type: FSDP)" +
        size_origins(values));
  }
  // With sequence parallelism FSDP shards over dp_shard_size x sp_size ranks
  // (every rank of a sequence-parallel group holds the same parameters).
  if (fsdp && sizes.dp_shard * sizes.sp == 1 && sizes.dp_replicate > 1) {
    throw ConfigError("parallelism_config: dp_shard_size 1 with FSDP shards nothing (" +
                      std::to_string(sizes.dp_replicate) +
                      " whole replicas are data parallelism: leave FSDP off, or shard over more "
                      "processes)" +
                      size_origins(values));
  }
  return sizes;
}

int tensor_parallel_size(const std::optional<ParallelismSizes>& sizes, long long autotp_size,
                         const std::string& file, int world_size) {
  const int tp = sizes ? sizes->tp : 1;
  if (autotp_size <= 1) return tp;
  const std::string autotp = file + ": tensor_parallel.autotp_size " + std::to_string(autotp_size);
  // The parallelism sizes were judged with their own tp_size.
  if (sizes && tp != autotp_size) {
    throw ConfigError(autotp + " but parallelism_config's tp_size is " + std::to_string(tp) +
                      ": give the same size in both");
  }
  if (world_size % autotp_size != 0) {
    throw ConfigError(autotp + " does not divide the job's " + std::to_string(world_size) +
                      " processes");
  }
  return static_cast<int>(autotp_size);
}

}  // namespace accelerate::sharding
