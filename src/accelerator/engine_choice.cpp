#include "accelerator/engine_choice.h"

#include "parallel/data_parallel_engine.h"
#include "sharding/sharded_engine.h"
#include "sharding/sharding_settings.h"

namespace accelerate {

EngineChoice choose_engine(const AcceleratorOptions& options, const Environment& env,
                           const JobState& job, MixedPrecision mixed_precision) {
  EngineChoice choice;
  choice.mixed_precision = mixed_precision;
  if (auto sizes = sharding::job_parallelism_sizes(options, env, job)) choice.sp_size = sizes->sp;
  const GradientSyncOptions sync_options = options.ddp_options();
  std::optional<sharding::ShardingSettings> sharded =
      sharding::resolve_sharding_settings(options, env, job, mixed_precision);
  if (!sharded) {
    choice.build = [sync_options](std::shared_ptr<Communicator> communicator,
                                  std::shared_ptr<GradScaler>) {
      return std::make_unique<DataParallelEngine>(std::move(communicator), sync_options);
    };
    return choice;
  }
  choice.mixed_precision = sharded->mixed_precision;
  choice.gradient_accumulation_steps = sharded->plugin.gradient_accumulation_steps();
  choice.build = [sync_options, settings = std::move(*sharded)](
                     std::shared_ptr<Communicator> communicator,
                     std::shared_ptr<GradScaler> scaler) {
    return std::make_unique<sharding::ShardedEngine>(std::move(communicator), settings,
                                                     sync_options, std::move(scaler));
  };
  return choice;
}

}  // namespace accelerate
