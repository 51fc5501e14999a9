// The parts of zero_training_bench (training_bench.cpp says what it
// measures and how): the settings and the model it trains
// (training_bench_workload.cpp), one stage's run and its byte counts
// (training_bench_stage.cpp), the table each rank job prints
// (training_bench_report.cpp) and the memory-limit demonstration
// (training_bench_memory_limit.cpp).
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "zero/block_stack.h"

namespace zero_training_bench {

using Clock = std::chrono::steady_clock;

// CPU offloading as DeepSpeed asks for it: offload_optimizer_device cpu,
// offload_param_device cpu (stage 3), or both. Under --hybrid, FSDP's
// cpu_offload, which is kBoth at stage 3 and the optimizer's part at stage 2.
enum class Offload { kNone, kOptimizer, kParam, kBoth };
const char* offload_name(Offload offload);

struct Settings {
  std::vector<int> ranks = {2, 4};
  std::vector<int> stages = {0, 1, 2, 3};
  int depth = 8;
  int width = 512;
  int batch = 32;
  int steps = 20;
  double memory_limit_mb = 0;     // > 0: the memory-limit demonstration
  std::string gpt_preset;         // "tiny"/"small": the GPT example's model instead of blocks
  std::string backward_prefetch;  // "": DeepSpeed's stage 3; else FSDP 1's with this policy
  Offload offload = Offload::kNone;
  // > 0: FSDP hybrid sharding (HYBRID_SHARD at stage 3, HYBRID_SHARD_ZERO2 at
  // stage 2) with shard groups of this many consecutive ranks.
  int hybrid = 0;
  // Whether the run prints where the state lives (device or host).
  bool reports_placement() const { return offload != Offload::kNone || hybrid > 0; }
};

// Throws std::invalid_argument naming the bad flag.
Settings parse(int argc, char** argv);

// What a run trains: the model, the loss of its (fixed) batch, and its
// parameter counts: Ψ, those outside every unit (whole at stage 3, as at
// stage 2) and the largest unit's; and the unit modules themselves.
struct Workload {
  std::shared_ptr<torch::nn::Module> module;
  std::function<at::Tensor()> loss;
  double psi = 0, root = 0, unit = 0;
  int units = 0;
  std::vector<torch::nn::Module*> unit_modules;  // owned by `module`
  std::string describe;
};

Workload make_workload(const Settings& s, int rank);
bench::BlockStack make_model(int depth, int width);
double parameters_of_block(int width);

// One BLAS thread per process (see training_bench_workload.cpp).
void one_blas_thread();

// The Accelerator's options for `stage` on `world_size` processes under the
// settings' offloading, hybrid sharding and backward prefetch.
accelerate::AcceleratorOptions stage_options(int stage, const Settings& s, int world_size);

struct Measured {
  double state_bytes = 0;  // parameters + gradients + optimizer state
  // Where the state lives (device + host = state): with CPU offloading the
  // host copies of the shards, of their gradients, and the optimizer state
  // beside them count as host (they are separate tensors even on a CPU job).
  double device_bytes = 0;
  double host_parameter_bytes = 0;
  double host_gradient_bytes = 0;
  double host_optimizer_bytes = 0;
  double host_bytes() const {
    return host_parameter_bytes + host_gradient_bytes + host_optimizer_bytes;
  }
  // Every tensor byte the process holds between steps (the input batch and
  // anything the library keeps besides the state, e.g. reusable buffers).
  double live_bytes = 0;
  // The most the live bytes rose above their value at the step's start
  // during the forward pass, the backward pass and the optimizer step.
  double forward_peak_rise = 0;
  double backward_peak_rise = 0;
  double optimizer_peak_rise = 0;
  double activation_bytes = 0;  // the rise at the end of the forward pass
  // Gradient buckets made in shared memory (no allocator sees them): the
  // most in use at once within a step (Communicator::shared_buffer_usage).
  double shared_bytes = 0;
  // As if the shared buckets' peak coincided with the allocator's.
  double step_rise_bytes() const {
    return std::max({forward_peak_rise, backward_peak_rise, optimizer_peak_rise}) + shared_bytes;
  }
  double step_ms = 0;  // medians
  double forward_ms = 0;
  double backward_ms = 0;
  double optimizer_ms = 0;
  double reduce_in_flight_ms = 0;  // per step, averaged over the measured steps
  double reduce_exposed_ms = 0;
};

double median(std::vector<double> values);

// Trains `stage` for the settings' steps (+2 warm-up) and counts its bytes
// and times; every rank returns the slowest (largest) rank's figures.
Measured run_stage(accelerate::Communicator& comm, std::shared_ptr<accelerate::Communicator> owner,
                   const Settings& s, int stage);

// Every stage of the settings on this rank's job, rank 0 printing the table.
void run_rank(accelerate::Communicator& comm, std::shared_ptr<accelerate::Communicator> owner,
              const Settings& s);

// --memory_limit_mb: forks its own jobs; returns the process exit code.
int run_memory_demo(const Settings& s);

}  // namespace zero_training_bench
