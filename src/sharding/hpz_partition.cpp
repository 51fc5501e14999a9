#include "sharding/hpz_partition.h"

#include "accelerate/common/errors.h"

namespace accelerate::sharding {

int hpz_partition_size(const std::optional<DeepSpeedConfig>& file, int zero_stage, int world_size,
                       int processes_per_machine, std::vector<std::string>* notes) {
  if (!file) return 1;
  const int64_t size = file->zero_optimization.zero_hpz_partition_size;
  if (size <= 1) return 1;  // DeepSpeed: 0 and 1 are both off
  const std::string key =
      file->source + ": zero_optimization.zero_hpz_partition_size " + std::to_string(size);
  const auto note = [&](const std::string& text) {
    if (notes != nullptr) notes->push_back(key + " " + text);
  };
  if (zero_stage != 3) {
    note("applies to ZeRO stage 3 (ZeRO++ hpZ); ignored at stage " + std::to_string(zero_stage));
    return 1;
  }
  if (world_size <= 1) {
    note("needs a job of several processes; this one trains as data parallelism");
    return 1;
  }
  // The secondary copy is gathered within a machine: a group that reached
  // past one would send the backward gathers over the network after all.
  const int per_machine = processes_per_machine > 0 ? processes_per_machine : world_size;
  if (per_machine % size != 0 || world_size % size != 0) {
    throw ConfigError(key + " does not divide the " + std::to_string(per_machine) +
                      " processes of each machine (the secondary copy of the parameters is "
                      "partitioned within a machine); use a divisor of " +
                      std::to_string(per_machine) + ", or 1 for plain stage 3");
  }
  if (size == world_size) {
    note(
        "is every process of the job: its secondary copy would be each process's own shard, "
        "so this is plain stage 3");
    return 1;
  }
  return static_cast<int>(size);
}

}  // namespace accelerate::sharding
