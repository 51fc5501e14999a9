// AcceleratorOptions: the Accelerator's keyword arguments, named as
// Accelerate's (snake_case), each with a chainable setter and a documented
// default:
//
//   accelerate::Accelerator accelerator(accelerate::AcceleratorOptions()
//       .mixed_precision(accelerate::MixedPrecision::kBF16)
//       .gradient_accumulation_steps(4));
//
// An option left unset falls back to the variable the launcher sets
// (ACCELERATE_MIXED_PRECISION, ...; docs/launching.md lists them), read from
// `environment`, then to the default.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "accelerate/checkpoint/checkpointing.h"
#include "accelerate/checkpoint/project_configuration.h"
#include "accelerate/common/arg.h"
#include "accelerate/common/environment.h"
#include "accelerate/common/job_state.h"
#include "accelerate/common/mixed_precision.h"
#include "accelerate/data/data_options.h"
#include "accelerate/distributed/parallelism_config.h"
#include "accelerate/parallel/gradient_reducer.h"
#include "accelerate/precision/autocast.h"
#include "accelerate/precision/grad_scaler.h"
#include "accelerate/sharding/deepspeed_plugin.h"
#include "accelerate/sharding/fsdp_plugin.h"
#include "accelerate/tracking/tracking.h"

namespace accelerate {

// Accelerate's GradientAccumulationPlugin.
struct GradientAccumulationPlugin {
  // Micro-batches per optimizer step.
  ACCELERATE_ARG(int, num_steps) = 1;
  // Schedulers advance only with real optimizer steps (see scheduler.h).
  ACCELERATE_ARG(bool, adjust_scheduler) = true;
  // Always sync (and step) on a loader's last batch, even mid-accumulation.
  ACCELERATE_ARG(bool, sync_with_dataloader) = true;
  // All-reduce gradients on every micro-batch (uses less memory on some
  // setups), while still stepping only every num_steps.
  ACCELERATE_ARG(bool, sync_each_batch) = false;
};

struct AcceleratorOptions {
  // Move prepared models to device() and loaders' batches too.
  ACCELERATE_ARG(bool, device_placement) = true;
  // kBF16 or kFP16 (fp16 needs CUDA; see docs/mixed-precision.md); unset:
  // ACCELERATE_MIXED_PRECISION, else kNo. With bf16/fp16 the thread that
  // constructs the Accelerator runs under autocast until it is destroyed (C++
  // has no forward hooks to wrap each model's forward), except inside
  // backward(); fp16 also scales the loss (grad_scaler_kwargs).
  ACCELERATE_ARG(std::optional<MixedPrecision>, mixed_precision);
  // Accelerate's AutocastKwargs: enabled=false keeps autocast off (autocast()
  // scopes still work); cache_enabled as torch.autocast's, for autocast()
  // scopes (the region around the loop never caches: autocast.h).
  ACCELERATE_ARG(AutocastOptions, autocast_kwargs);
  // Accelerate's GradScalerKwargs, used with mixed precision fp16.
  ACCELERATE_ARG(GradScalerOptions, grad_scaler_kwargs);
  // Shortcut for gradient_accumulation_plugin.num_steps; unset:
  // ACCELERATE_GRADIENT_ACCUMULATION_STEPS, else the plugin's num_steps.
  ACCELERATE_ARG(std::optional<int>, gradient_accumulation_steps);
  ACCELERATE_ARG(GradientAccumulationPlugin, gradient_accumulation_plugin);
  // Force the CPU (unset: ACCELERATE_USE_CPU, else false).
  ACCELERATE_ARG(std::optional<bool>, cpu);
  // Sharding of prepared loaders (split_batches, dispatch_batches, ...).
  ACCELERATE_ARG(DataLoaderConfiguration, dataloader_config);
  // DistributedDataParallelKwargs: bucket_cap_mb, find_unused_parameters, ...
  ACCELERATE_ARG(GradientSyncOptions, ddp_options);
  // Sharded data parallelism (ZeRO stages 1 to 3, deepspeed_plugin.h);
  // unset: the one `accelerate launch` describes in the environment, else
  // plain data parallelism.
  ACCELERATE_ARG(std::optional<DeepSpeedPlugin>, deepspeed_plugin);
  // The same engine in FSDP's words (fsdp_plugin.h): FULL_SHARD is stage 3
  // with units from the auto wrap policy. Setting both plugins is a
  // ConfigError.
  ACCELERATE_ARG(std::optional<FullyShardedDataParallelPlugin>, fsdp_plugin);
  // Replicas x shards (parallelism_config.h): with fsdp_plugin, hybrid
  // sharding when dp_shard_size is below the job's processes; unset: the
  // sizes `accelerate launch` gives (PARALLELISM_CONFIG_*), if any.
  ACCELERATE_ARG(std::optional<ParallelismConfig>, parallelism_config);
  // InitProcessGroupKwargs (backend, timeout) and debug mode.
  ACCELERATE_ARG(JobOptions, job_options);
  // Step schedulers together with optimizers (Accelerate's
  // step_scheduler_with_optimizer); false: schedulers step on every call.
  ACCELERATE_ARG(bool, step_scheduler_with_optimizer) = true;
  // Not in Accelerate: fix glibc malloc's thresholds so a step's freed
  // buffers are reused instead of unmapped (malloc_tuning.h; up to 1.3x
  // faster steps on CPU). Process-wide, applied by the constructor that
  // reads the environment; GLIBC_TUNABLES malloc settings take precedence.
  ACCELERATE_ARG(bool, tune_malloc) = true;
  // Experiment trackers (docs/tracking.md): "tensorboard", "jsonl", "csv",
  // "all", or the name() of one of `trackers`. Files go to the project's
  // logging_dir/project_name; only the main process writes.
  ACCELERATE_ARG(std::vector<std::string>, log_with);
  // User trackers (GeneralTracker subclasses), used when log_with names them.
  ACCELERATE_ARG(std::vector<std::shared_ptr<GeneralTracker>>, trackers);
  // Accelerate's ProjectConfiguration: project_dir, logging_dir, automatic
  // checkpoint naming, total_limit, iteration (project_configuration.h).
  ACCELERATE_ARG(ProjectConfiguration, project_config);
  // Accelerate's project_dir argument; overrides project_config.project_dir.
  ACCELERATE_ARG(std::optional<std::string>, project_dir);
  // How save_state writes: fsync (default on) and a stage observer
  // (checkpointing.h).
  ACCELERATE_ARG(CheckpointOptions, checkpoint_options);
  // Not in Accelerate: the environment every unset option above, the job's
  // topology (RANK, WORLD_SIZE, ...), threads and malloc tuning are read
  // from, as LoggerOptions' environment. Unset: this process's environment.
  ACCELERATE_ARG(std::optional<Environment>, environment);
};

}  // namespace accelerate
