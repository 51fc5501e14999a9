// ShardingSettings: everything a sharded job was set up with, resolved once
// when the Accelerator is built, from AcceleratorOptions' deepspeed_plugin
// or fsdp_plugin, or from what `accelerate launch` put in the environment
// (DeepSpeed variables and config file, FSDP variables). ShardedEngine runs
// with them. Internal.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>

#include "accelerate/accelerator/accelerator_options.h"
#include "accelerate/common/distributed_type.h"
#include "accelerate/common/environment.h"
#include "accelerate/common/job_state.h"
#include "accelerate/common/mixed_precision.h"
#include "accelerate/sharding/deepspeed_plugin.h"
#include "sharding/deepspeed_config.h"
#include "sharding/parallelism_sizes.h"
#include "sharding/unit_policy.h"
#include "sharding/zero_optimizer.h"

namespace accelerate::sharding {

// What ZeRO shards besides the gradients' averaging (docs/sharding.md).
enum class ZeroStage {
  kDataParallel = 0,    // nothing: every process holds everything
  kOptimizerState = 1,  // the optimizer state
  kGradients = 2,       // and the averaged gradients
  kParameters = 3,      // and the parameters, gathered unit by unit
};

struct ShardingSettings {
  DeepSpeedPlugin plugin;
  DistributedType distributed_type = DistributedType::kDeepSpeed;  // or kFsdp
  ZeroStage stage = ZeroStage::kDataParallel;
  // The job's mixed precision: its own, or what a DeepSpeed config file's
  // fp16 / bf16 section decided (mixed_precision_from_file).
  MixedPrecision mixed_precision = MixedPrecision::kNo;
  bool mixed_precision_from_file = false;
  // The DeepSpeed config file, when there is one; checked against the
  // program once it has prepared an optimizer (DeepSpeedFileObjects).
  std::optional<DeepSpeedConfig> file;
  // CPU offloading as it runs (nothing in a job of one process, or on a
  // CPU-only job unless ACCELERATE_OFFLOAD_ON_CPU_JOB).
  Offload offload;
  // Stage 3: how a model's units are found (DeepSpeed: its repeated blocks;
  // FSDP: its auto wrap policy), and whether the next unit's gather starts
  // while one runs, in forward and in backward (DeepSpeed and FSDP 2 always;
  // FSDP 1's forward_prefetch / backward_prefetch). Without the backward
  // prefetch each unit's reduce-scatter also finishes before the next
  // unit's backward: one unit at a time.
  UnitPolicy unit_policy;
  bool prefetch_forward = true;
  bool prefetch_backward = true;
  // Stage 3: save_state writes each process's pieces of the models
  // (DeepSpeed's way, and FSDP's SHARDED_STATE_DICT / LOCAL_STATE_DICT);
  // false: one whole file, written unit by unit (FSDP's FULL_STATE_DICT).
  bool sharded_state_dict = false;
  // Stage 3 with zero3_init_flag (or FSDP's cpu_ram_efficient_loading):
  // Accelerator::zero3_init() builds empty on every process but the main
  // one, and prepare() frees every unit until it runs.
  bool weights_from_main_process = false;
  // Hybrid sharding (FSDP's HYBRID_SHARD at stage 3, _HYBRID_SHARD_ZERO2 at
  // stage 2): the processes of each group of this many consecutive ranks
  // (a machine's, unless set) shard the model among themselves, and the
  // groups replicate it. With tensor parallelism, the size counts
  // data-parallel processes, one per tensor-parallel group (the shard groups
  // are along dp_shard x sp of the device mesh). 0: one group, the whole job.
  int hybrid_shard_size = 0;
  // ZeRO++ hpZ (DeepSpeed's zero_hpz_partition_size, stage 3): after a
  // unit's gather over the job each process keeps its part of the whole
  // parameters among each group of this many consecutive ranks (within a
  // machine), and the unit's later gathers, until the parameters next
  // change, run within that group. 1: off.
  int hpz_partition_size = 1;
  // Tensor parallelism: parallelism_config's tp_size or DeepSpeed's
  // tensor_parallel.autotp_size (the mesh's innermost dimension; ZeRO shards
  // over the other ones).
  int tensor_parallel_size = 1;
  // Low-precision collectives (docs/sharding.md): the dtype the parameters'
  // all-gathers (stages 1-3) and the gradients' reduce-scatters (stages 2-3)
  // carry. nullopt: the tensors' own (fp32), bitwise today's results. From
  // FSDP's mixed_precision_policy or DeepSpeed's communication_data_type
  // (reduce only); "fp32" is nullopt.
  std::optional<at::ScalarType> param_dtype;
  std::optional<at::ScalarType> reduce_dtype;
  // ZeRO++ quantized communication (DeepSpeed's zero_quantized_weights /
  // zero_quantized_gradients, stage 3 only, as in DeepSpeed; the engine
  // maps them to wires, docs/sharding.md "Quantized communication"): qwZ
  // gathers the parameters as int8 blocks of 4096 (fp32 masters kept; it
  // takes the place of param_dtype), qgZ reduce-scatters the gradients as
  // int4 blocks of 4096 (it takes the place of reduce_dtype).
  bool quantized_weights = false;
  bool quantized_gradients = false;

  // The norm DeepSpeed clips every step's gradients to; nullopt: none.
  std::optional<double> clipping() const;
  // zero3_save_16bit_model under fp16/bf16 mixed precision: the dtype of the
  // floating-point weights save_model writes and get_state_dict returns
  // (DeepSpeed's parameters are 16-bit then; with fp32 training they are
  // fp32, and so is the "16-bit" model). nullopt otherwise.
  std::optional<at::ScalarType> sixteen_bit_dtype() const;
};

// The settings of a sharded job, or nullopt for a job without DeepSpeed or
// FSDP settings. `mixed_precision`: the job's own. ConfigError for settings
// that cannot run; the main process prints the notes (ignored keys, offload
// that changes nothing, ...).
// Accelerate 1.x's parallelism sizes for this job (AcceleratorOptions'
// parallelism_config, else what `accelerate launch` wrote), checked as
// parallelism_sizes() checks them; nullopt when the sizes are not in use.
std::optional<ParallelismSizes> job_parallelism_sizes(const AcceleratorOptions& options,
                                                      const Environment& env, const JobState& job);

std::optional<ShardingSettings> resolve_sharding_settings(const AcceleratorOptions& options,
                                                          const Environment& env,
                                                          const JobState& job,
                                                          MixedPrecision mixed_precision);

}  // namespace accelerate::sharding
