// ZeRO++ hierarchical partitioning (hpZ, DeepSpeed's
// zero_optimization.zero_hpz_partition_size; docs/sharding.md, "ZeRO++
// hpZ"): which group size a job runs with, judged the same way by the
// ranks and by `accelerate launch` before any process starts. LibTorch-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sharding/deepspeed_config.h"

namespace accelerate::sharding {

// The size of the groups of consecutive processes that keep hpZ's secondary
// copy (1: hpZ is off) for a job of `world_size` processes, each machine
// running `processes_per_machine` of them, at ZeRO stage `zero_stage`, with
// the DeepSpeed config file `file` (none: off). Off below stage 3 (DeepSpeed
// reads the key at stage 3 only), in a job of one process, and when the
// group would be the whole job (the secondary copy would then be the
// primary shard itself); each of those appends a note to `notes` (may be
// null) when the file asks for hpZ. ConfigError, one line naming the file
// and the key, for a size that does not divide the processes of a machine
// (the secondary copy never leaves one).
int hpz_partition_size(const std::optional<DeepSpeedConfig>& file, int zero_stage, int world_size,
                       int processes_per_machine, std::vector<std::string>* notes);

}  // namespace accelerate::sharding
