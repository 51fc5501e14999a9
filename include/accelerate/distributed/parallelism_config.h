// Accelerate 1.x's ParallelismConfig: how the processes of a job divide
// into copies of the model (dp_replicate_size) and the processes each copy
// is sharded over (dp_shard_size). With an FSDP plugin, dp_shard_size below
// the job's processes is hybrid sharding: shard groups of dp_shard_size
// consecutive ranks, replicated dp_replicate_size times (docs/sharding.md,
// "Hybrid sharding"):
//
//   Accelerator accelerator(AcceleratorOptions()
//       .fsdp_plugin(FullyShardedDataParallelPlugin())
//       .parallelism_config(ParallelismConfig().dp_replicate_size(2).dp_shard_size(4)));
//
// The product of the sizes must be the job's processes (all sizes 1: data
// parallelism over every process, as in Accelerate); dp_shard_size above 1
// needs the FSDP plugin; tp_size above 1 is tensor parallelism
// (docs/tensor-parallel.md: tp consecutive ranks split each layer of a model
// with a plan, Accelerator::tensor_parallel()); cp_size (context
// parallelism) is accepted only as 1. sp_size above 1 is sequence
// parallelism (DeepSpeed Ulysses, docs/sequence-parallel.md): groups of
// sp_size consecutive ranks split every sequence between them, and
// world = dp_replicate_size x dp_shard_size x sp_size x tp_size (sizes all
// 1 but sp_size and tp_size: world / (sp_size x tp_size) replicas).
// Accelerator::sequence_parallel() gives the model its group. Anything else is a ConfigError when
// the Accelerator is built, naming the sizes. `accelerate launch` passes
// the same sizes as PARALLELISM_CONFIG_* (docs/launching.md); sizes set here
// replace those.
#pragma once

#include "accelerate/common/arg.h"

namespace accelerate {

// How sequences are split: Accelerate's only backend, DeepSpeed's Ulysses
// all-to-all around attention.
enum class SequenceParallelBackend { kDeepSpeed };

struct ParallelismConfig {
  ACCELERATE_ARG(int, dp_replicate_size) = 1;
  ACCELERATE_ARG(int, dp_shard_size) = 1;
  ACCELERATE_ARG(int, sp_size) = 1;
  ACCELERATE_ARG(SequenceParallelBackend, sp_backend) = SequenceParallelBackend::kDeepSpeed;
  ACCELERATE_ARG(int, tp_size) = 1;
  // Megatron's sequence parallelism between the tensor-parallel layers
  // (docs/tensor-parallel.md): the norms, residuals and embedding output
  // hold 1/tp of the tokens, all-gathers and reduce-scatters replace the
  // all-reduces. An accelerate-cpp setting (Megatron-LM's
  // --sequence-parallel); no effect at tp_size 1. The Llama family, GPT-2
  // and BERT have it.
  ACCELERATE_ARG(bool, tp_sequence_parallel) = false;
  ACCELERATE_ARG(int, cp_size) = 1;
};

}  // namespace accelerate
