// Which ParallelEngine an Accelerator runs, decided once from its options
// and environment before it connects to the other processes (so settings
// that cannot run stop every process before any network is touched), and
// what that choice decides for the rest of the Accelerator. Internal.
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "accelerate/accelerator/accelerator_options.h"
#include "accelerate/common/environment.h"
#include "accelerate/common/job_state.h"
#include "accelerate/common/mixed_precision.h"
#include "accelerate/distributed/communicator.h"
#include "accelerate/precision/grad_scaler.h"
#include "distributed/device_mesh.h"
#include "parallel/parallel_engine.h"

namespace accelerate {

struct EngineChoice {
  // The job's mixed precision: its own, or a DeepSpeed file's fp16/bf16 section's.
  MixedPrecision mixed_precision = MixedPrecision::kNo;
  // The engine's own accumulation setting (DeepSpeed's), which wins over
  // the Accelerator's; nullopt: none.
  std::optional<int> gradient_accumulation_steps;
  // The job's device mesh: ParallelismConfig's sp_size, and the
  // data-parallel processes as replicas x shards, as the engine shards them
  // (FSDP's hybrid strategies and dp_shard_size: shards within groups of
  // consecutive ranks, replicated across them).
  distributed::MeshShape mesh_shape;
  // Megatron's sequence parallelism on the tp dimension
  // (ParallelismConfig::tp_sequence_parallel): TensorParallel's flag.
  bool tp_sequence_parallel = false;
  // Builds the engine once the job is connected and its mesh laid out;
  // `scaler` is the fp16 loss scaler, or null.
  std::function<std::unique_ptr<ParallelEngine>(distributed::DeviceMesh& mesh,
                                                std::shared_ptr<GradScaler> scaler)>
      build;
};

// `mixed_precision`: what the options and environment ask for.
EngineChoice choose_engine(const AcceleratorOptions& options, const Environment& env,
                           const JobState& job, MixedPrecision mixed_precision);

}  // namespace accelerate
