// What the ZeRO++ hpZ tests share: four thread ranks that act as machines of
// `per_machine` processes (as `accelerate launch` numbers them), and the
// DeepSpeed config file that asks for stage 3 with zero_hpz_partition_size.
#pragma once

#include <fstream>
#include <string>

#include "accelerate/accelerator/accelerator_options.h"
#include "accelerate/common/job_state.h"
#include "accelerate/sharding/deepspeed_plugin.h"
#include "support/thread_ranks.h"

namespace accelerate {
namespace testing {

// Rank `rank` of `world`, on machine rank / per_machine.
inline JobState machine_rank_job(int rank, int world, int per_machine) {
  JobState job = thread_rank_job(rank, world);
  job.node_rank = rank / per_machine;
  job.num_nodes = world / per_machine;
  job.local_rank = rank % per_machine;
  job.local_world_size = per_machine;
  return job;
}

// A stage-3 DeepSpeed config file at `path` with zero_hpz_partition_size
// `hpz` (1: the key left out, DeepSpeed's default) and, with
// `offload_parameters`, offload_param_device cpu.
inline std::string write_hpz_config(const std::string& path, int hpz,
                                    bool offload_parameters = false) {
  std::ofstream file(path);
  file << "{\"train_micro_batch_size_per_gpu\": \"auto\", \"gradient_accumulation_steps\": "
          "\"auto\", \"zero_optimization\": {\"stage\": 3";
  if (hpz != 1) file << ", \"zero_hpz_partition_size\": " << hpz;
  if (offload_parameters) file << ", \"offload_param\": {\"device\": \"cpu\"}";
  file << "}}\n";
  return path;
}

// Options that shard by that file, with the small buckets the ZeRO tests use
// (several per unit). `offload_copies`: ACCELERATE_OFFLOAD_ON_CPU_JOB, so
// that offloading copies on this CPU job as on a GPU.
// `zero3_init`: Accelerate's zero3_init_flag (the units start freed).
inline AcceleratorOptions hpz_options(const std::string& config_file, bool offload_copies = false,
                                      bool zero3_init = false) {
  AcceleratorOptions options;
  options.ddp_options(GradientSyncOptions().bucket_cap_mb(0.002).first_bucket_cap_mb(0.0005));
  options.deepspeed_plugin(DeepSpeedPlugin().hf_ds_config(config_file).zero3_init_flag(zero3_init));
  if (offload_copies) options.environment(Environment{{"ACCELERATE_OFFLOAD_ON_CPU_JOB", "true"}});
  return options;
}

}  // namespace testing
}  // namespace accelerate
