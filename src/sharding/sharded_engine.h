// ShardedEngine: ZeRO stages 0-3 with CPU offload (docs/sharding.md), set up
// from DeepSpeed or FSDP settings. Gradients travel through the reducers of
// a DataParallelEngine it holds; on top of them each prepared model gets
// its shards (stages 1-3) and units (stage 3), and each optimizer steps its
// shard only. In a job of one process every stage is data parallelism.
// Internal; see parallel/parallel_engine.h.
#pragma once

#include <memory>
#include <vector>

#include "accelerate/precision/grad_scaler.h"
#include "distributed/device_mesh.h"
#include "parallel/data_parallel_engine.h"
#include "sharding/deepspeed_file_objects.h"
#include "sharding/parameter_units.h"
#include "sharding/sharding_settings.h"
#include "sharding/zero_optimizer.h"

namespace accelerate::sharding {

class ShardedEngine : public ParallelEngine {
 public:
  // Shards over `mesh`'s dp_shard x sp groups, replicated over dp_replicate
  // (hybrid sharding). `scaler`: the job's fp16 loss scaler, or null.
  ShardedEngine(distributed::DeviceMesh& mesh, ShardingSettings settings,
                GradientSyncOptions options, std::shared_ptr<GradScaler> scaler);
  ~ShardedEngine() override;

  DistributedType distributed_type() const override { return settings_.distributed_type; }
  EmptyWeightsGuard zero3_init() override;
  void prepare_model(torch::nn::Module& module,
                     const std::optional<c10::Device>& placement) override;
  void build_optimizer(DummyOptim& optimizer) override;
  void prepare_optimizer(PreparedOptimizerBase& optimizer) override;
  void check_plain_optimizer() const override;
  void build_schedule(DummyScheduler& scheduler, const PreparedProgram& program) override;
  void finish_prepare(const PreparedProgram& program) override;

  void set_sync(bool sync) override { replicas_.set_sync(sync); }
  void before_backward(const at::Tensor& loss) override { replicas_.before_backward(loss); }
  void after_backward() override;
  std::optional<double> gradient_clipping() const override { return settings_.clipping(); }
  void before_unscale() override;
  double clip_grad_norm(const std::vector<at::Tensor>& parameters, double max_norm,
                        double norm_type) override;
  void clip_grad_value(const std::vector<at::Tensor>& parameters, double clip_value) override;
  GradientNormParts gradient_norm_parts(const std::vector<at::Tensor>& parameters, double norm_type,
                                        const IsTensorParallelPart& is_part) override;
  void scale_gradients(const std::vector<at::Tensor>& parameters, double factor) override;
  std::vector<GradientReducer*> reducers() const override { return replicas_.reducers(); }

  ScopeGuard full_weights() override;
  ScopeGuard exact_weights() override;
  void whole_weights_written(const torch::nn::Module& module) override;
  std::unique_ptr<checkpoint::WeightGroups> weight_groups(const torch::nn::Module& module) override;
  bool shards_weights(const torch::nn::Module& module) const override {
    return model_shards(module) != nullptr;
  }
  // Stage 3's weights in pieces or by groups, sharded optimizer state by
  // each process (sharding/sharded_state_items.h); the rest whole.
  std::unique_ptr<checkpoint::CheckpointItem> model_item(torch::nn::Module& module,
                                                         std::size_t index, NamedTensors weights,
                                                         bool by_groups) override;
  std::unique_ptr<checkpoint::CheckpointItem> optimizer_item(
      torch::optim::Optimizer& optimizer, std::size_t index,
      const std::vector<torch::nn::Module*>& models,
      const FindTensorParallelPart& find_part) override;
  std::optional<at::ScalarType> saved_weights_dtype() const override {
    return settings_.sixteen_bit_dtype();
  }
  ShardPlace shard_place(int job_rank, int job_world_size) const override;

 private:
  // One prepared model of a job of several processes.
  struct ShardedModel {
    const torch::nn::Module* module;
    GradientReducer* reducer;
    std::shared_ptr<ModelShards> shards;    // stages 1-3
    std::unique_ptr<ParameterUnits> units;  // stage 3
  };
  bool shards_anything() const;
  // The shards of `module`'s weights (stage 3), or null where they are whole.
  ModelShards* model_shards(const torch::nn::Module& module) const;
  // What steps `optimizer`'s shard on this process, or null where it is whole.
  ShardedOptimizer* optimizer_shards(const torch::optim::Optimizer& optimizer) const;
  // Whether any process built `module` inside zero3_init(); Error on every
  // process when one holds a tensor computed there. Collective.
  bool agree_on_empty_build(const torch::nn::Module& module);
  // Stage 1/2 over the reducer's buckets, stage 3 over the units that
  // settings_.unit_policy finds in `module`. `units_start_free`: the model
  // was built inside zero3_init() (on some process): stage 3 fills the
  // shards from the main process and frees every unit until it first runs.
  void shard_model(torch::nn::Module& module, GradientReducer& reducer, bool units_start_free);
  const ShardedModel* find(const torch::nn::Module& module) const;
  // The sharded optimizers stepping any of `parameters`.
  std::vector<ShardedOptimizer*> covering(const std::vector<at::Tensor>& parameters) const;

  // The processes that shard a model among themselves (`shard`: the whole
  // job, or under hybrid sharding the group of this process), under hybrid
  // sharding those holding the same shard in the other groups (`replicas`,
  // else null), and under ZeRO++ hpZ this process's group of
  // hpz_partition_size consecutive ranks (`secondary`, else null). For
  // ZeRO++ qgZ over a job of several machines (not hybrid), this process's
  // machine and the processes of its local rank on every machine
  // (`machine`, `across`: its two-level reduce-scatter), else null.
  struct Groups {
    std::shared_ptr<Communicator> job;
    std::shared_ptr<Communicator> shard;
    std::shared_ptr<Communicator> replicas;
    std::shared_ptr<Communicator> secondary;
    std::shared_ptr<Communicator> machine;
    std::shared_ptr<Communicator> across;
  };
  // Collective: every process asks the mesh for the same groups, in the same order.
  static Groups form_groups(distributed::DeviceMesh& mesh, const ShardingSettings& settings);

  ShardingSettings settings_;
  Groups groups_;  // before replicas_, which runs on groups_.shard
  DataParallelEngine replicas_;
  std::shared_ptr<GradScaler> scaler_;
  DeepSpeedFileObjects file_objects_;
  std::vector<ShardedModel> models_;
  std::vector<std::shared_ptr<ShardedOptimizer>> optimizers_;
  std::vector<const torch::optim::Optimizer*> prepared_optimizers_;
  bool zero3_init_called_ = false;  // on this process
  bool tensor_parallel_;            // the mesh splits the model (tp above 1)
};

}  // namespace accelerate::sharding
