// The Accelerator's ZeRO parts (docs/sharding.md), shared by the files that
// implement the Accelerator (prepare and the step in accelerator.cpp,
// save_state/load_state in accelerator_checkpoint.cpp). Internal.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "accelerate/accelerator.h"
#include "accelerate/dummy_optim.h"
#include "accelerate/dummy_scheduler.h"
#include "accelerate/scope_guard.h"
#include "sharding/deepspeed_config.h"
#include "sharding/parameter_units.h"
#include "sharding/unit_policy.h"
#include "sharding/zero_optimizer.h"

namespace accelerate {

// Whether a job with `plugin` (and the FSDP plugin it came from) builds its
// model on the main process only: stage 3 with zero3_init_flag or FSDP's
// cpu_ram_efficient_loading (Accelerator::zero3_init).
inline bool builds_from_main_process(const DeepSpeedPlugin& plugin,
                                     const std::optional<FullyShardedDataParallelPlugin>& fsdp) {
  return plugin.zero_stage() == 3 &&
         (plugin.zero3_init_flag() || (fsdp && fsdp->cpu_ram_efficient_loading()));
}

// The shards of each prepared model, and the sharded optimizers stepping
// them. Only in multi-process jobs: with one process every stage is data
// parallelism.
struct Accelerator::Zero {
  // The plugin this job runs with: AcceleratorOptions::deepspeed_plugin
  // (its hf_ds_config file applied), or its fsdp_plugin as the ZeRO stage
  // it is (stage 3's units from its auto wrap policy), else the one
  // `accelerate launch` describes in the environment; null when there is
  // none. Checks it against the job (ConfigError) and prints its notes on
  // the main process.
  static std::unique_ptr<Zero> configure(const AcceleratorOptions& options, const Environment& env,
                                         const JobState& job, MixedPrecision mixed_precision);

  DeepSpeedPlugin plugin;
  std::string distributed_type = "DEEPSPEED";  // or "FSDP"
  // What a DeepSpeed config file switches on (fp16.enabled / bf16.enabled
  // true) when the job set no mixed precision itself.
  std::optional<MixedPrecision> file_precision;
  int stage() const { return plugin.zero_stage(); }
  // The DeepSpeed config file, when there is one; checked against the
  // program by resolve_file once the program has prepared an optimizer.
  std::optional<sharding::DeepSpeedConfig> file;
  bool resolved = false;
  // Fills the file's "auto" entries from `program` and refuses what
  // contradicts it (ConfigError, the same on every process); the main
  // process prints the notes. Once.
  void resolve_file(sharding::ProgramValues program, bool main_process);
  // DummyOptim / DummyScheduler (prepare()): builds what the file's
  // optimizer / scheduler section describes in their place; ConfigError
  // when the job has no file, or the file no such section.
  void build_optimizer(DummyOptim& optimizer);
  void build_schedule(DummyScheduler& scheduler, int world_size, bool split_batches);
  bool optimizer_from_file = false, schedule_from_file = false;  // built, so used
  // The norm DeepSpeed clips every step's gradients to; nullopt: none.
  std::optional<double> clipping() const {
    const auto norm = plugin.gradient_clipping();
    return norm && *norm > 0 ? norm : std::nullopt;
  }
  // CPU offloading, as shard_model applies it (nothing in a job of one
  // process, or on a CPU-only job unless ACCELERATE_OFFLOAD_ON_CPU_JOB).
  sharding::Offload offload;
  std::vector<std::shared_ptr<sharding::ModelShards>> models;
  std::vector<std::shared_ptr<sharding::ShardedOptimizer>> optimizers;
  // Stage 3: how prepare() finds a model's units, and each model's units
  // (in the order of `models`).
  sharding::UnitPolicy unit_policy;
  // Stage 3: start the next unit's gather while one runs, in forward and in
  // backward (DeepSpeed and FSDP 2 always; FSDP 1's forward_prefetch /
  // backward_prefetch).
  // Without the backward prefetch each unit's reduce-scatter also finishes
  // before the next unit's backward: one unit at a time.
  bool prefetch_forward = true, prefetch_backward = true;
  std::vector<std::unique_ptr<sharding::ParameterUnits>> units;
  std::vector<const torch::nn::Module*> unit_roots;  // the module each `units` entry shards
  // Stage 3: the units and the shards of `module` (a prepared model), or
  // null (`models` and `units` are parallel at stage 3).
  sharding::ParameterUnits* units_for(const torch::nn::Module& module) const {
    auto it = std::find(unit_roots.begin(), unit_roots.end(), &module);
    return it == unit_roots.end() ? nullptr : units[it - unit_roots.begin()].get();
  }
  sharding::ModelShards* shards_for(const torch::nn::Module& module) const {
    auto it = std::find(unit_roots.begin(), unit_roots.end(), &module);
    return it == unit_roots.end() ? nullptr : models[it - unit_roots.begin()].get();
  }
  // Stage 3: save_state writes each process's pieces of the models
  // (DeepSpeed's way, and FSDP's SHARDED_STATE_DICT / LOCAL_STATE_DICT);
  // false: one whole file, written unit by unit (FSDP's FULL_STATE_DICT).
  bool sharded_state_dict = false;
  // Stage 3 with zero3_init_flag (or FSDP's cpu_ram_efficient_loading):
  // Accelerator::zero3_init() builds empty on every process but the main
  // one, and prepare() frees every unit until it runs.
  bool weights_from_main_process = false;
  bool zero3_init_called = false;  // on this process (Accelerator::zero3_init)
  // zero3_save_16bit_model under fp16/bf16 mixed precision: the dtype of the
  // floating-point weights save_model writes and get_state_dict returns
  // (DeepSpeed's parameters are 16-bit then; with fp32 training they are
  // fp32, and so is the "16-bit" model). nullopt otherwise.
  std::optional<at::ScalarType> sixteen_bit_dtype(MixedPrecision mixed_precision) const {
    if (stage() != 3 || !plugin.zero3_save_16bit_model()) return std::nullopt;
    if (mixed_precision == MixedPrecision::kFP16) return at::kHalf;
    if (mixed_precision == MixedPrecision::kBF16) return at::kBFloat16;
    return std::nullopt;
  }

  // Shards `reducer`'s model (prepare()): stage 1/2 over its buckets, stage
  // 3 over the units unit_policy finds in `module`.
  // `units_start_free`: the model was built inside zero3_init() (on some
  // process); stage 3 fills the shards from the main process and frees
  // every unit until it first runs.
  void shard_model(const std::shared_ptr<Communicator>& communicator, torch::nn::Module& module,
                   GradientReducer& reducer, bool units_start_free);
  // Stage 3: every unit's full weights until the guard goes, for code that
  // reads whole weights (get_state_dict, save_state's pre-hooks).
  ScopeGuard full_weights();

  // The sharded optimizers stepping any of `parameters`.
  std::vector<sharding::ShardedOptimizer*> covering(
      const std::vector<at::Tensor>& parameters) const {
    std::vector<sharding::ShardedOptimizer*> found;
    for (const auto& sharded : optimizers) {
      if (sharded->covers_any(parameters)) found.push_back(sharded.get());
    }
    return found;
  }

  // The sharded optimizer stepping `optimizer`, or null.
  sharding::ShardedOptimizer* sharding(const torch::optim::Optimizer* optimizer) const {
    auto it = std::find_if(optimizers.begin(), optimizers.end(),
                           [&](const auto& sharded) { return &sharded->optimizer() == optimizer; });
    return it == optimizers.end() ? nullptr : it->get();
  }
};

}  // namespace accelerate
