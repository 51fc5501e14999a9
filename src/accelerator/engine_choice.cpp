#include "accelerator/engine_choice.h"

#include "accelerate/common/errors.h"
#include "parallel/data_parallel_engine.h"
#include "sharding/sharded_engine.h"
#include "sharding/sharding_settings.h"

namespace accelerate {
namespace {

// Data parallelism and stage 0 replicate over every data-parallel process
// (one per sequence- and tensor-parallel group); ZeRO shards over all of
// them, or over groups of hybrid_shard_size (which span the
// sequence-parallel groups inside them).
distributed::MeshShape job_mesh_shape(int world_size, int sp, int tp,
                                      const std::optional<sharding::ShardingSettings>& sharded) {
  distributed::MeshShape shape;
  shape.sp = sp;
  shape.tp = tp;
  const int data_parallel = world_size / tp;  // parallelism_sizes judged that tp divides it
  if (!sharded || sharded->stage == sharding::ZeroStage::kDataParallel) {
    shape.dp_replicate = data_parallel / sp;
    return shape;
  }
  const int hybrid = sharded->hybrid_shard_size;
  const int sharing = hybrid > 1 && hybrid < data_parallel ? hybrid : data_parallel;
  // Machines of different sizes under the hybrid strategies (parallelism_sizes
  // judged dp_shard_size x sp_size).
  if (data_parallel % sharing != 0) {
    throw ConfigError("hybrid sharding: shard groups of " + std::to_string(sharing) +
                      " processes do not divide the job's " + std::to_string(data_parallel) +
                      " data-parallel processes");
  }
  shape.dp_replicate = data_parallel / sharing;
  shape.dp_shard = sharing / sp;
  return shape;
}

}  // namespace

EngineChoice choose_engine(const AcceleratorOptions& options, const Environment& env,
                           const JobState& job, MixedPrecision mixed_precision) {
  EngineChoice choice;
  choice.mixed_precision = mixed_precision;
  const auto sizes = sharding::job_parallelism_sizes(options, env, job);
  const GradientSyncOptions sync_options = options.ddp_options();
  std::optional<sharding::ShardingSettings> sharded =
      sharding::resolve_sharding_settings(options, env, job, mixed_precision);
  // A DeepSpeed file's autotp_size counts where the parallelism sizes are not in use.
  const int tp = sharded ? sharded->tensor_parallel_size : sizes ? sizes->tp : 1;
  choice.mesh_shape = job_mesh_shape(job.world_size, sizes ? sizes->sp : 1, tp, sharded);
  choice.tp_sequence_parallel = sizes && sizes->tp_sequence_parallel;
  if (!sharded) {
    choice.build = [sync_options](distributed::DeviceMesh& mesh, std::shared_ptr<GradScaler>) {
      return std::make_unique<DataParallelEngine>(mesh.group(distributed::kReplicaDims),
                                                  sync_options);
    };
    return choice;
  }
  choice.mixed_precision = sharded->mixed_precision;
  choice.gradient_accumulation_steps = sharded->plugin.gradient_accumulation_steps();
  choice.build = [sync_options, settings = std::move(*sharded)](
                     distributed::DeviceMesh& mesh, std::shared_ptr<GradScaler> scaler) {
    return std::make_unique<sharding::ShardedEngine>(mesh, settings, sync_options,
                                                     std::move(scaler));
  };
  return choice;
}

}  // namespace accelerate
