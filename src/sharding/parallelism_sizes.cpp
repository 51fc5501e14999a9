#include "sharding/parallelism_sizes.h"

#include <string>

#include "accelerate/errors.h"
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
  const int tp = settings::kParallelismTpSize.read_or_default(values);
  const int cp = settings::kParallelismCpSize.read_or_default(values);
  refuse_model_parallelism(values, settings::kParallelismTpSize, tp, "tensor parallelism");
  refuse_model_parallelism(values, settings::kParallelismCpSize, cp, "context parallelism");
  // Accelerate: nothing set is data parallelism over every process (over
  // the sequence-parallel groups with sp_size).
  if (sizes.dp_replicate == 1 && sizes.dp_shard == 1) {
    if (world_size % sizes.sp != 0) {
      throw ConfigError("parallelism_config: sp_size " + std::to_string(sizes.sp) +
                        " does not divide the job's " + std::to_string(world_size) + " processes" +
                        size_origins(values));
    }
    sizes.dp_replicate = world_size / sizes.sp;
  }
  const long long total = static_cast<long long>(sizes.dp_replicate) * sizes.dp_shard * sizes.sp;
  if (total != world_size) {
    throw ConfigError("parallelism_config: dp_replicate_size " +
                      std::to_string(sizes.dp_replicate) + " x dp_shard_size " +
                      std::to_string(sizes.dp_shard) +
                      (sizes.sp > 1 ? " x sp_size " + std::to_string(sizes.sp) : std::string()) +
                      " is " + std::to_string(total) + " processes, but the job has " +
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
  if (fsdp && sizes.dp_shard * sizes.sp == 1 && world_size > 1) {
    throw ConfigError("parallelism_config: dp_shard_size 1 with FSDP shards nothing (" +
                      std::to_string(sizes.dp_replicate) +
                      " whole replicas are data parallelism: leave FSDP off, or shard over more "
                      "processes)" +
                      size_origins(values));
  }
  return sizes;
}

}  // namespace accelerate::sharding
