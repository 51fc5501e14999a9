// The training figures of `accelerate estimate-memory` beyond Hugging Face
// Accelerate's table: per process, the model state accelerate-cpp's ZeRO
// engine holds (device and host apart, with CPU offloading and hybrid
// sharding), DeepSpeed's own estimate for the same setup, and the
// activations of a transformer. Torch-free; docs/cli.md derives every term.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cli/transformer_shape.h"

namespace accelerate::cli {

enum class EstimateMixedPrecision { kNo, kFp16, kBf16 };

struct TrainingSetup {
  int zero_stage = 0;  // 0 (data parallel) to 3
  bool offload_optimizer = false;
  bool offload_param = false;  // stage 3 only
  int num_processes = 1;       // in the whole job
  int num_nodes = 1;           // machines; divides num_processes
  bool hybrid = false;         // FSDP HYBRID_SHARD(_ZERO2): shard within a node only
  // Tensor parallelism: groups of tp_size consecutive processes split the
  // layers; the data-parallel groups (and the shard groups in them) are
  // the processes with one tp rank. Divides a node's processes.
  int tp_size = 1;
  EstimateMixedPrecision mixed_precision = EstimateMixedPrecision::kNo;

  int processes_per_node() const { return num_processes / num_nodes; }
  // The processes one shard is cut for: a node's (hybrid) or the job's, of
  // one tp rank.
  int shard_processes() const { return (hybrid ? processes_per_node() : num_processes) / tp_size; }
  // What the engine runs: one process per shard group trains as data
  // parallelism (nothing to shard), except a job of one process that
  // offloads: its shards are whole buckets (ZeRO-Offload on one GPU).
  int effective_stage() const {
    if (shard_processes() > 1) return zero_stage;
    const bool alone_offloading = num_processes == 1 && (offload_optimizer || offload_param);
    return alone_offloading ? zero_stage : 0;
  }
};

// Bytes one process holds between steps, where they live.
struct ModelStateBytes {
  double parameters_device = 0, parameters_host = 0;
  double gradients_device = 0, gradients_host = 0;
  double optimizer_device = 0, optimizer_host = 0;  // Adam's two moments
  double device() const { return parameters_device + gradients_device + optimizer_device; }
  double host() const { return parameters_host + gradients_host + optimizer_host; }
};

// accelerate-cpp's ZeRO for `parameters` (Ψ) of which `outside_units` stay
// whole at stage 3 (no unit holds them: embeddings, final norm), trained
// with Adam(W). Weights, gradients and both moments are float32 whatever
// the mixed precision (autocast computes in 16 bits from fp32 weights), so
// with S = setup.shard_processes():
//   stage 0: 4Ψ + 4Ψ + 8Ψ                 stage 1: 4Ψ + 4Ψ + 8Ψ/S
//   stage 2: 4Ψ + 4Ψ/S + 8Ψ/S             stage 3: units 16Ψu/S, the rest as stage 2
// Optimizer offload moves the moments to the host beside a host copy of the
// parameter shard and of the gradient shard (4Ψ/S each); parameter offload
// (stage 3) keeps a unit's shard in host memory only. Bucket padding (fewer
// than S elements a bucket) is left out.
ModelStateBytes model_state_per_process(double parameters, double outside_units,
                                        const TrainingSetup& setup);

// The whole weights of a stage-3 unit that a process gathers during a step:
// the unit computing and the one prefetched, float32.
double gathered_unit_bytes(double unit_parameters, const TrainingSetup& setup);

// DeepSpeed's estimate_zero2_model_states_mem_needs (stages 1 and 2) and
// estimate_zero3_model_states_mem_needs (zero_init on) for the same
// processes and offloading, with its additional_buffer_factor of 1.5:
// bytes per GPU and host bytes per node. nullopt at stage 0, and at stage 3
// without a largest layer.
struct DeepSpeedEstimate {
  double device_per_process = 0;
  double host_per_node = 0;
};
std::optional<DeepSpeedEstimate> deepspeed_estimate(double parameters,
                                                    std::optional<double> largest_layer_parameters,
                                                    const TrainingSetup& setup);

// Activations of one process's forward and backward pass (float32, no
// dropout), as this project's GPT computes them on LibTorch's explicit
// attention: `held` is what the forward pass leaves for backward;
// the peaks are the most live activation bytes (activations, their
// gradients, temporaries) above the model state in each pass.
struct ActivationOptions {
  int64_t seq_len = 0;
  int64_t micro_batch = 1;
  bool checkpointing = false;
  // The forward pass under bf16 autocast (fp32 weights): matmul outputs and
  // the weights' casts in 2 bytes (measured for the GPT-2 family only).
  bool bf16 = false;
};
struct ActivationBytes {
  double held = 0;
  double forward_peak = 0;
  double backward_peak = 0;
  double peak() const { return forward_peak > backward_peak ? forward_peak : backward_peak; }
};
ActivationBytes activation_bytes(const TransformerShape& shape, const ActivationOptions& options);

}  // namespace accelerate::cli
