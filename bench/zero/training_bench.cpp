// ZeRO stages 0-3 side by side on one model: per-process bytes of
// parameters + gradients + optimizer state (fp32 AdamW) against the ZeRO
// formulas 16Ψ, 8Ψ + 8Ψ/N, 4Ψ + 12Ψ/N and 16Ψ/N, the peak of those bytes
// within a step, and the median step time against stage 0 on the same
// number of processes.
//
// The model is a stack of residual blocks (two Linear layers each) called
// through accelerate::unit_forward, so that stage 3 makes every block a unit
// and stages 0-2 run it as plain calls.
//
// Steady-state bytes are counted from the tensors themselves after a step
// (each storage once): the model's parameters (flat buffers at stages 1 and
// 2, padded; at stage 3 a unit's parameters alias a buffer whose memory is
// freed after the step, so they count 0), the tensors the optimizer steps
// (stage 3's shards are tensors of their own, which sharding::unit_shards
// finds), their .grad, the reducer's gradient shards (stages 2 and 3), and
// every optimizer state tensor.
//
// The peak within a step comes from a counting CPU allocator installed in
// each rank process (LibTorch's own CPU allocator keeps no statistics on
// 1.13, and its profiler memory reporting only sees the profiled thread):
// every tensor allocation, on any thread, adds to a live byte count whose
// maximum is tracked. "peak" = steady-state bytes + the most the live count
// rose above its value at the start of a step, so it includes what only
// lives within a step: gathered unit buffers, full gradients waiting for
// their reduce-scatter, buckets, activations and temporaries; it is printed
// per phase (forward, backward, optimizer), and the activations apart (how
// far the count had risen when the forward pass returned), since the ZeRO
// memory goal is about model state only. Gradient buckets that the reducer makes
// in shared memory (Communicator::reduce_scatter_buffer, on one machine)
// bypass the allocator: the bytes the communicator keeps reserved for them
// are added to "all tensors", and the most of them in use at once within a
// step to the peak (as if both peaks coincided: an upper bound). Max RSS (getrusage) was not used:
// glibc keeps freed blocks (tune_malloc_for_training keeps them on purpose),
// so RSS tells the high-water mark of the heap, not of live tensors, and
// every stage would need a process of its own.
//
// Step time is split into forward, backward (Accelerator::backward, with
// the gradient collectives it waits for) and optimizer (step + zero_grad).
// The reducer's statistics tell how much of the gradient collectives'
// in-flight time was hidden behind backward; stage 3's prefetched gathers
// have no statistics, so their hidden share is estimated (see run_rank).
//
// --memory_limit_mb M runs a different demonstration instead: a model
// whose stage-0 training state does not fit in M MB per process but whose
// stage-3 state does, trained at stage 0 and then at stage 3 by fresh
// processes whose address space is limited (RLIMIT_AS) to their baseline
// plus M MB; it prints how each ended.
//
// --gpt tiny|small trains the GPT example's model instead (its blocks are
// the units; its embeddings and final LayerNorm stay whole at stage 3, so
// the stage-3 formula becomes 16Ψu/N + 4Ψr + 12Ψr/N, Ψr the parameters
// outside the units).
//
// --backward_prefetch NO_PREFETCH|BACKWARD_PRE runs stage 3 from an FSDP 1
// plugin (FULL_SHARD, the blocks as units, forward_prefetch as the backward
// one) instead of DeepSpeed's, which always prefetches: NO_PREFETCH keeps one
// unit whole at a time in backward.
//
// --offload optimizer|param|both trains stages 1-3 with CPU offloading
// (DeepSpeed's offload_optimizer_device / offload_param_device cpu; param
// applies to stage 3). On this CPU-only job offloading would be a no-op, so
// the bench sets ACCELERATE_OFFLOAD_ON_CPU_JOB=true (unless the caller set
// it), which makes the engine keep its host copies as separate tensors
// (docs/sharding.md, "CPU offloading"); a "where" line then splits the
// state into device and host bytes: the host copies of the shards, of their
// gradients, and the Adam states beside them count as host.
//
// --hybrid G shards within groups of G consecutive ranks and replicates
// across the groups (FSDP HYBRID_SHARD at stage 3, HYBRID_SHARD_ZERO2 at
// stage 2, through ParallelismConfig's dp_shard_size G x dp_replicate_size
// N/G); the formulas' N is then G. With --offload both it is FSDP's
// cpu_offload.
//
// Usage: zero_training_bench [--ranks 2,4] [--depth 8] [--width 512] [--gpt small]
//          [--batch 32] [--steps 20] [--stages 0,1,2,3] [--backward_prefetch NO_PREFETCH]
//          [--offload none|optimizer|param|both] [--hybrid G]
//        zero_training_bench --memory_limit_mb 256 [--ranks 2] [--depth 16]
//          [--batch 32] [--steps 3]
//
// The parts are in training_bench_workload.cpp (settings, model, options),
// training_bench_stage.cpp (one stage's run and byte counts),
// training_bench_report.cpp (the table) and training_bench_memory_limit.cpp.
#include <cstdlib>
#include <iostream>

#include "support/forked_ranks.h"
#include "zero/training_bench.h"

int main(int argc, char** argv) {
  using namespace zero_training_bench;
  Settings settings;
  try {
    settings = parse(argc, argv);
  } catch (const std::exception& error) {
    std::cerr << "zero_training_bench: " << error.what() << "\n";
    return 2;
  }
  if (settings.memory_limit_mb > 0) {
    // Each stage needs processes of its own (a failed allocation can leave a
    // rank anywhere, and the limit cannot be lifted for the next stage), so
    // this mode forks them itself.
    if (std::getenv("WORLD_SIZE") != nullptr) {
      std::cerr << "zero_training_bench: --memory_limit_mb forks its own processes; run it "
                   "without a launcher\n";
      return 2;
    }
    return run_memory_demo(settings);
  }
  return bench::run_forked_jobs(
      "zero-training-bench", settings.ranks, {true},
      [&](std::shared_ptr<accelerate::Communicator> comm) { run_rank(*comm, comm, settings); });
}
