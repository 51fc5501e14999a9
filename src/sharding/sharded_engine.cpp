#include "sharding/sharded_engine.h"

#include <algorithm>
#include <iostream>

#include <torch/nn/module.h>

#include "accelerate/accelerator/optimizer.h"
#include "accelerate/common/errors.h"
#include "accelerate/sharding/dummy_optim.h"
#include "accelerate/sharding/dummy_scheduler.h"
#include "checkpoint/model_streaming.h"
#include "parallel/sharded_gradients.h"
#include "parallel/state_broadcast.h"
#include "sharding/quantized_collectives.h"
#include "sharding/shard_layout.h"
#include "sharding/sharded_state_items.h"
#include "sharding/unit_policy.h"

namespace accelerate::sharding {
namespace {

// Operations inside an EmptyWeightsGuard give meta tensors (factories and
// initialisers keep CPU tensors): one registered in a module cannot receive
// the main process's values.
std::string meta_tensor_problem(const torch::nn::Module& module) {
  const auto problem = [](const std::string& kind, const std::string& name) {
    return kind + " '" + name +
           "' is a meta tensor: it was computed inside zero3_init(), where operations give no "
           "values; create it with a factory (torch::zeros, torch::empty) or an initialiser, or "
           "register it after the guard";
  };
  for (const auto& item : module.named_parameters(true)) {
    if (item.value().is_meta()) return problem("parameter", item.key());
  }
  for (const auto& item : module.named_buffers(true)) {
    if (item.value().is_meta()) return problem("buffer", item.key());
  }
  return "";
}

constexpr const char* kModelBeforeOptimizer =
    "ZeRO shards an optimizer over its model's gradient buckets: prepare the model before its "
    "optimizer (e.g. accelerator.prepare(model, optimizer, loader))";

// ZeRO shards an optimizer when it is prepared, over the models prepared
// by then: a model prepared later would keep its parameters whole in it,
// while its reducer released their gradients after each backward.
void refuse_optimizers_holding(const std::vector<const torch::optim::Optimizer*>& optimizers,
                               torch::nn::Module& module) {
  const std::vector<at::Tensor> parameters = module.parameters(true);
  for (const torch::optim::Optimizer* optimizer : optimizers) {
    if (shares_parameters(*optimizer, parameters)) throw ConfigError(kModelBeforeOptimizer);
  }
}

std::vector<torch::nn::Module*> unit_modules(torch::nn::Module& module, const UnitPolicy& policy) {
  std::vector<torch::nn::Module*> found;
  for (const Unit& unit : find_units(module, policy)) found.push_back(unit.module);
  return found;
}

// ZeRO++'s wires: DeepSpeed's qwZ sends int8 weights, its qgZ int4
// gradients; blocks of the kernels' default (docs/sharding.md says where
// DeepSpeed's group sizes differ).
const QuantizedWire kQwzWire{quantize::QuantBits::kInt8, quantize::kDefaultBlockSize};
const QuantizedWire kQgzWire{quantize::QuantBits::kInt4, quantize::kDefaultBlockSize};

// The block quantizer runs on CPU tensors only (src/quantize).
void check_quantized_on_cpu(const ShardingSettings& settings, const torch::nn::Module& module) {
  if (!settings.quantized_weights && !settings.quantized_gradients) return;
  for (const at::Tensor& parameter : module.parameters(true)) {
    if (!parameter.device().is_cpu()) {
      throw ConfigError(
          "ZeRO++ zero_quantized_weights / zero_quantized_gradients: the block quantizer runs on "
          "CPU tensors only, and this model's parameters are on " +
          parameter.device().str());
    }
  }
}

}  // namespace

ShardedEngine::Groups ShardedEngine::form_groups(distributed::DeviceMesh& mesh,
                                                 const ShardingSettings& settings) {
  using distributed::MeshDim;
  const distributed::MeshShape& shape = mesh.shape();
  const JobState& job = mesh.job()->job();
  const int world = job.world_size;
  const bool hybrid = shape.dp_replicate > 1 && shape.dp_shard > 1;
  // hpz_partition_size gave 1 unless stage 3 and a divisor of each
  // machine's processes below the job's.
  const int hpz = settings.hpz_partition_size;
  if (hpz > 1 && hybrid) {
    throw ConfigError(
        "ZeRO++ hpZ (zero_hpz_partition_size) and hybrid sharding cannot be combined; choose one");
  }
  Groups groups;
  groups.job = mesh.job();
  // Hybrid sharding: shards within groups of consecutive ranks (a machine's,
  // as launchers number them), replicated across the groups.
  groups.shard = mesh.group(hybrid ? distributed::kShardDims : distributed::kReplicaDims);
  if (hybrid) groups.replicas = mesh.group({MeshDim::kDpReplicate});
  if (hpz > 1) groups.secondary = mesh.block(distributed::kReplicaDims, hpz);
  // qgZ's two levels when the job spans machines of equal, consecutive
  // ranks and the shard group is the whole job.
  const int per_machine = job.local_world_size;
  if (settings.quantized_gradients && settings.stage == ZeroStage::kParameters && !hybrid &&
      job.num_nodes > 1 && per_machine > 1 && per_machine * job.num_nodes == world) {
    groups.machine = mesh.block(distributed::kReplicaDims, per_machine);
    groups.across = mesh.stride(distributed::kReplicaDims, per_machine);
  }
  return groups;
}

ShardedEngine::ShardedEngine(distributed::DeviceMesh& mesh, ShardingSettings settings,
                             GradientSyncOptions options, std::shared_ptr<GradScaler> scaler)
    : settings_(std::move(settings)),
      groups_(form_groups(mesh, settings_)),
      replicas_(groups_.shard, std::move(options)),
      scaler_(std::move(scaler)),
      file_objects_(settings_.file),
      tensor_parallel_(mesh.shape().tp > 1) {}

ShardedEngine::~ShardedEngine() = default;

bool ShardedEngine::shards_anything() const {
  // One process has nothing to shard, unless it offloads: then its "shards"
  // are whole buckets kept in host memory.
  return settings_.stage != ZeroStage::kDataParallel &&
         (replicas_.communicator()->job().is_distributed() || settings_.offload.parameters ||
          settings_.offload.optimizer);
}

EmptyWeightsGuard ShardedEngine::zero3_init() {
  const JobState& job = groups_.job->job();
  // Hybrid sharding: every group needs the weights whole at first.
  const bool empty =
      settings_.weights_from_main_process && job.is_distributed() && !groups_.replicas;
  if (empty) zero3_init_called_ = true;
  return EmptyWeightsGuard(empty && !job.is_main_process());
}

bool ShardedEngine::agree_on_empty_build(const torch::nn::Module& module) {
  // Every process learns whether any built the model inside zero3_init()
  // (the processes free the units alike, or their gathers would not match)
  // and whether any holds a tensor computed there, which has no values to
  // receive: then every process stops with the same error.
  const std::string mine = (zero3_init_called_ ? "1" : "0") + meta_tensor_problem(module);
  const std::vector<std::string> all = replicas_.communicator()->all_gather_bytes(mine);
  bool called = false;
  for (std::size_t rank = 0; rank < all.size(); ++rank) {
    called |= all[rank].front() == '1';
    if (all[rank].size() > 1) {
      throw Error("prepare failed on rank " + std::to_string(rank) + ": " + all[rank].substr(1));
    }
  }
  return called;
}

void ShardedEngine::prepare_model(torch::nn::Module& module,
                                  const std::optional<c10::Device>& placement) {
  const bool distributed = replicas_.communicator()->job().is_distributed();
  // Before placement: a module built empty cannot move.
  const bool built_empty =
      settings_.weights_from_main_process && distributed && agree_on_empty_build(module);
  if (settings_.weights_from_main_process && distributed && !built_empty &&
      groups_.job->job().is_main_process()) {
    std::cerr << "accelerate: note: "
              << (settings_.distributed_type == DistributedType::kFsdp ? "cpu_ram_efficient_loading"
                                                                       : "zero3_init_flag")
              << ": build the model inside accelerator.zero3_init() so that only the main "
                 "process holds its whole weights (every unit must then run through "
                 "unit_forward)\n";
  }
  if (placement) module.to(*placement);
  if (!distributed && !shards_anything()) return;
  if (shards_anything()) refuse_optimizers_holding(prepared_optimizers_, module);
  if (groups_.replicas) {
    // Every process starts from the main process's weights and buffers,
    // broadcast once over the job (the groups then have nothing to spread).
    std::vector<at::Tensor> state = module.parameters(true);
    for (const at::Tensor& buffer : module.buffers(true)) state.push_back(buffer);
    accelerate::detail::broadcast_coalesced(*groups_.job, state);
  }
  // At stage 3 the trained parameters travel bucket by bucket straight into
  // the shards (ModelShards), so that a process that built its model empty
  // (zero3_init) never holds them whole; the rest travels here.
  const bool stage3 = settings_.stage == ZeroStage::kParameters;
  const bool spread_in_group = !groups_.replicas;  // else broadcast over the job above
  GradientReducer* reducer =
      replicas_.add_model(module, /*broadcast_state=*/!stage3 && spread_in_group,
                          /*even_alone=*/shards_anything());
  if (stage3 && spread_in_group)
    broadcast_unbucketed_state(*replicas_.communicator(), module, *reducer);
  if (shards_anything()) shard_model(module, *reducer, /*units_start_free=*/built_empty);
}

void ShardedEngine::shard_model(torch::nn::Module& module, GradientReducer& reducer,
                                bool units_start_free) {
  const auto& communicator = replicas_.communicator();
  const int stage = static_cast<int>(settings_.stage);
  if (settings_.stage != ZeroStage::kParameters) {
    auto shards = std::make_shared<ModelShards>(communicator, reducer, stage, std::vector<int>(),
                                                /*release_units=*/false, settings_.offload,
                                                settings_.param_dtype);
    if (settings_.stage == ZeroStage::kGradients)
      detail::ShardedGradients::set_reduce_scatter_wire(reducer, settings_.reduce_dtype);
    if (groups_.replicas)
      detail::ShardedGradients::set_replica_communicator(reducer, groups_.replicas);
    models_.push_back({&module, &reducer, std::move(shards), nullptr});
    return;
  }
  check_quantized_on_cpu(settings_, module);
  const std::vector<torch::nn::Module*> found = unit_modules(module, settings_.unit_policy);
  const std::vector<int> unit_of = parameter_units(module, found);
  auto shards = std::make_shared<ModelShards>(
      communicator, reducer, stage, unit_of,
      /*release_units=*/units_start_free, settings_.offload, settings_.param_dtype,
      settings_.quantized_weights ? std::optional<QuantizedWire>(kQwzWire) : std::nullopt);
  detail::ShardedGradients::set_reduce_scatter_wire(reducer, settings_.reduce_dtype);
  if (settings_.quantized_gradients && groups_.machine) {
    // qgZ across machines: inside each machine, then between them.
    detail::ShardedGradients::set_reduce_scatter(
        reducer,
        [machine = groups_.machine, across = groups_.across](
            Communicator&, const at::Tensor& buffer, at::Tensor& shard, const std::string& what) {
          return quantized_reduce_scatter_two_level(*machine, *across, buffer, shard,
                                                    "ZeRO++ qgZ " + what, kQgzWire);
        });
  } else if (settings_.quantized_gradients) {
    // qgZ: each bucket's reduce-scatter within the shard group; hybrid
    // sharding's replica sum of the shard afterwards stays fp32.
    detail::ShardedGradients::set_reduce_scatter(
        reducer, [](Communicator& comm, const at::Tensor& buffer, at::Tensor& shard,
                    const std::string& what) {
          return quantized_reduce_scatter(comm, buffer, shard, "ZeRO++ qgZ " + what, kQgzWire);
        });
  }
  if (groups_.secondary) shards->keep_secondary_copies(groups_.secondary);
  auto units =
      std::make_unique<ParameterUnits>(shards, found, unit_of, /*reshard_after_forward=*/true,
                                       settings_.prefetch_forward, settings_.prefetch_backward,
                                       /*start_released=*/units_start_free);
  if (!settings_.prefetch_backward)
    detail::ShardedGradients::set_overlap_reduce_scatter(reducer, false);
  if (groups_.replicas)
    detail::ShardedGradients::set_replica_communicator(reducer, groups_.replicas);
  models_.push_back({&module, &reducer, std::move(shards), std::move(units)});
}

void ShardedEngine::build_optimizer(DummyOptim& optimizer) {
  file_objects_.build_optimizer(optimizer);
}

void ShardedEngine::prepare_optimizer(PreparedOptimizerBase& optimizer) {
  prepared_optimizers_.push_back(&optimizer.base_optimizer());
  if (!shards_anything()) return;
  // The models holding any of its parameters (the same on every process).
  std::vector<std::shared_ptr<ModelShards>> holding;
  for (const ShardedModel& model : models_) {
    if (shares_parameters(optimizer.base_optimizer(), model.reducer->parameters())) {
      holding.push_back(model.shards);
    }
  }
  if (holding.empty()) throw ConfigError(kModelBeforeOptimizer);
  const auto& communicator = replicas_.communicator();
  auto sharded = std::make_shared<ShardedOptimizer>(communicator, optimizer.base_optimizer(),
                                                    std::move(holding));
  optimizer.attach_shard_hooks(sharded);
  optimizers_.push_back(sharded);
  // Each process checks only its shard for inf/NaN: a step skipped anywhere
  // is skipped everywhere.
  if (scaler_) {
    scaler_->combine_found_inf_with(
        [job = groups_.job](at::Tensor& found_inf) { job->all_reduce(found_inf, ReduceOp::kMax); });
  }
}

void ShardedEngine::check_plain_optimizer() const {
  if (!shards_anything()) return;
  throw ConfigError(
      "ZeRO steps each process's shard of the parameters: declare the optimizer as "
      "accelerate::Optimizer<YourOptimizer> so that prepare() can shard it");
}

void ShardedEngine::build_schedule(DummyScheduler& scheduler, const PreparedProgram& program) {
  file_objects_.build_schedule(scheduler, program.world_size, program.split_batches);
}

void ShardedEngine::finish_prepare(const PreparedProgram& program) {
  if (!program.has_optimizer) return;
  ProgramValues values;
  values.world_size = program.world_size;
  values.micro_batch_size = program.micro_batch_size;
  values.gradient_accumulation_steps = program.gradient_accumulation_steps;
  values.gradient_clipping = settings_.clipping();
  values.mixed_precision = program.mixed_precision;
  file_objects_.check_against(values, groups_.job->job().is_main_process());
}

void ShardedEngine::after_backward() {
  replicas_.after_backward();
  for (ShardedModel& model : models_) {
    if (model.units) model.units->after_backward();
  }
  // Offloading: the optimizer steps in host memory.
  for (ShardedModel& model : models_) {
    if (model.reducer->sync_enabled()) model.shards->gradients_to_host();
  }
}

void ShardedEngine::before_unscale() {
  for (auto& sharded : optimizers_) sharded->bind_gradients();  // the shards' gradients
}

std::vector<ShardedOptimizer*> ShardedEngine::covering(
    const std::vector<at::Tensor>& parameters) const {
  std::vector<ShardedOptimizer*> found;
  for (const auto& sharded : optimizers_) {
    if (sharded->covers_any(parameters)) found.push_back(sharded.get());
  }
  return found;
}

double ShardedEngine::clip_grad_norm(const std::vector<at::Tensor>& parameters, double max_norm,
                                     double norm_type) {
  // The optimizers found once a step, not once per piece of the work.
  const auto sharded = covering(parameters);
  if (sharded.empty()) return ParallelEngine::clip_grad_norm(parameters, max_norm, norm_type);
  const double norm =
      sharding::shard_gradient_norm_parts(*replicas_.communicator(), sharded, norm_type, nullptr)
          .norm();
  if (const auto factor = clip_coefficient(norm, max_norm)) {
    sharding::scale_shard_gradients(sharded, *factor);
  }
  return norm;
}

// Each process holds the unscaled, averaged gradients of its shard only:
// the norm is combined from every process's shards.
GradientNormParts ShardedEngine::gradient_norm_parts(const std::vector<at::Tensor>& parameters,
                                                     double norm_type,
                                                     const IsTensorParallelPart& is_part) {
  const auto sharded = covering(parameters);
  if (sharded.empty()) return ParallelEngine::gradient_norm_parts(parameters, norm_type, is_part);
  return sharding::shard_gradient_norm_parts(*replicas_.communicator(), sharded, norm_type,
                                             is_part);
}

void ShardedEngine::scale_gradients(const std::vector<at::Tensor>& parameters, double factor) {
  const auto sharded = covering(parameters);
  if (sharded.empty()) return ParallelEngine::scale_gradients(parameters, factor);
  sharding::scale_shard_gradients(sharded, factor);
}

void ShardedEngine::clip_grad_value(const std::vector<at::Tensor>& parameters, double clip_value) {
  const auto sharded = covering(parameters);
  if (sharded.empty()) return ParallelEngine::clip_grad_value(parameters, clip_value);
  sharding::clip_grad_value(sharded, clip_value);
}

ScopeGuard ShardedEngine::full_weights() {
  auto exact = std::make_shared<ScopeGuard>(exact_weights());
  for (ShardedModel& model : models_) {
    if (model.units) model.units->gather_all();
  }
  return ScopeGuard([this, exact] {
    for (ShardedModel& model : models_) {
      if (model.units) model.units->release_all();
    }
  });
}

// Saved weights are the fp32 masters (as FSDP's state dicts hold its fp32
// parameters): while saving, gathers carry them unrounded, and afterwards
// the whole weights are rounded again, so training goes on with the bits it
// would have had without the save.
ScopeGuard ShardedEngine::exact_weights() {
  std::vector<std::shared_ptr<ModelShards>> rounded;
  for (ShardedModel& model : models_) {
    if (model.shards && model.shards->rounds_gathers()) rounded.push_back(model.shards);
  }
  if (rounded.empty()) return ScopeGuard(nullptr);
  for (const auto& shards : rounded) {
    shards->set_exact_gathers(true);
    shards->gather_parameters();
  }
  return ScopeGuard([rounded] {
    for (const auto& shards : rounded) {
      shards->set_exact_gathers(false);
      shards->gather_parameters();
    }
  });
}

void ShardedEngine::whole_weights_written(const torch::nn::Module& module) {
  const ShardedModel* model = find(module);
  if (model && model->units && tensor_parallel_) {
    // Loaded into the gathered weights (full_weights), parts put back.
    model->shards->adopt_gathered_weights();
    return;
  }
  if (!model || !model->shards || !model->shards->rounds_gathers()) return;
  model->shards->adopt_whole_weights();
  model->shards->gather_parameters();
}

const ShardedEngine::ShardedModel* ShardedEngine::find(const torch::nn::Module& module) const {
  auto it = std::find_if(models_.begin(), models_.end(),
                         [&](const ShardedModel& model) { return model.module == &module; });
  return it == models_.end() ? nullptr : &*it;
}

std::unique_ptr<checkpoint::WeightGroups> ShardedEngine::weight_groups(
    const torch::nn::Module& module) {
  const ShardedModel* model = find(module);
  return model && model->units ? model->units->weight_groups() : nullptr;
}

ModelShards* ShardedEngine::model_shards(const torch::nn::Module& module) const {
  // Stage 3 only: at stages 1 and 2 every process holds the whole weights.
  const ShardedModel* model = find(module);
  return model && model->units ? model->shards.get() : nullptr;
}

std::unique_ptr<checkpoint::CheckpointItem> ShardedEngine::model_item(torch::nn::Module& module,
                                                                      std::size_t index,
                                                                      NamedTensors weights,
                                                                      bool by_groups) {
  ModelShards* shards = model_shards(module);
  // At tensor parallelism the checkpoint holds whole tensors, saved and
  // loaded while every unit is gathered and its parts are whole.
  if (shards == nullptr || tensor_parallel_)
    return ParallelEngine::model_item(module, index, std::move(weights), false);
  std::function<std::unique_ptr<checkpoint::WeightGroups>()> groups;
  if (by_groups) groups = [this, &module] { return weight_groups(module); };
  return sharded_model_item(module, index, std::move(weights), *shards,
                            settings_.sharded_state_dict, std::move(groups));
}

std::unique_ptr<checkpoint::CheckpointItem> ShardedEngine::optimizer_item(
    torch::optim::Optimizer& optimizer, std::size_t index,
    const std::vector<torch::nn::Module*>& models, const FindTensorParallelPart& find_part) {
  if (ShardedOptimizer* shards = optimizer_shards(optimizer))
    return sharded_optimizer_item(optimizer, index, *shards, find_part);
  return ParallelEngine::optimizer_item(optimizer, index, models, find_part);
}

ParallelEngine::ShardPlace ShardedEngine::shard_place(int job_rank, int job_world_size) const {
  if (!groups_.shard) return {job_rank, job_world_size, true};
  // The shard group: the job, or each tensor-parallel rank's processes
  // (each such group saves its own shards). Hybrid sharding: one copy, the
  // first machine's processes write theirs (replica rank 0).
  return {groups_.shard->rank(), groups_.shard->world_size(),
          !groups_.replicas || groups_.replicas->rank() == 0};
}

ShardedOptimizer* ShardedEngine::optimizer_shards(const torch::optim::Optimizer& optimizer) const {
  auto it = std::find_if(optimizers_.begin(), optimizers_.end(),
                         [&](const auto& sharded) { return &sharded->optimizer() == &optimizer; });
  return it == optimizers_.end() ? nullptr : it->get();
}

}  // namespace accelerate::sharding
