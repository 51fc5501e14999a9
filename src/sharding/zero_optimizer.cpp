#include "sharding/zero_optimizer.h"

#include <cmath>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/optim/lbfgs.h>

#include "accelerate/errors.h"
#include "parallel/storage_alias.h"

namespace accelerate::sharding {

ModelShards::ModelShards(std::shared_ptr<Communicator> communicator, GradientReducer& reducer,
                         int stage)
    : communicator_(std::move(communicator)), reducer_(reducer) {
  if (stage != 1 && stage != 2)
    throw Error("ModelShards: stage 1 or 2, got " + std::to_string(stage));
  const std::vector<at::Tensor>& parameters = reducer.parameters();
  for (const GradientBucket& bucket : reducer.buckets()) {
    if (bucket.device != parameters[bucket.parameter_indices.front()].device()) {
      throw ConfigError("ZeRO on CUDA needs the NCCL backend (this job's gradients of " +
                        bucket.device.str() + " parameters would be staged through the host)");
    }
  }
  reducer.partition_buckets(stage == 1 ? GradientPartition::kReplicated
                                       : GradientPartition::kSharded);
  c10::NoGradGuard no_grad;
  for (const GradientBucket& bucket : reducer.buckets()) {
    const at::Tensor& first = parameters[bucket.parameter_indices.front()];
    at::Tensor buffer = at::zeros({bucket.padded_numel}, first.options().requires_grad(false));
    for (std::size_t index : bucket.parameter_indices) {
      const at::Tensor& parameter = parameters[index];
      const std::int64_t offset = reducer.offset_in_bucket(index);
      buffer.narrow(0, offset, parameter.numel()).copy_(parameter.detach().reshape({-1}));
      // The parameter keeps its identity (autograd hooks, optimizer
      // references, the module's registration); only its memory moves.
      parameter.set_data(detail::storage_alias(buffer, offset, parameter.sizes()));
    }
    buffers_.push_back(buffer);
  }
}

std::int64_t ModelShards::shard_numel(std::size_t b) const {
  return reducer_.buckets().at(b).padded_numel / communicator_->world_size();
}

void ModelShards::gather_parameters() {
  std::vector<PendingCollective> pending;
  for (std::size_t b = 0; b < buffers_.size(); ++b) {
    at::Tensor buffer = buffers_[b];
    at::Tensor shard = buffer.narrow(0, shard_begin(b), shard_numel(b));
    pending.push_back(communicator_->all_gather_into_async(
        shard, buffer, "ZeRO parameter gather of bucket " + std::to_string(b)));
  }
  for (PendingCollective& p : pending) p.wait();
  // The parameters changed in place behind autograd's back (through their
  // buffers): a graph saved before the step must notice, as it would
  // after an optimizer's in-place update.
  for (const at::Tensor& parameter : reducer_.parameters()) {
    if (parameter.requires_grad()) parameter.unsafeGetTensorImpl()->bump_version();
  }
}

ShardedOptimizer::ShardedOptimizer(std::shared_ptr<Communicator> communicator,
                                   torch::optim::Optimizer& optimizer,
                                   std::vector<std::shared_ptr<ModelShards>> models)
    : communicator_(std::move(communicator)), optimizer_(optimizer), models_(std::move(models)) {
  if (dynamic_cast<torch::optim::LBFGS*>(&optimizer) != nullptr) {
    throw ConfigError(
        "ZeRO steps each process's shard of the parameters on its own, which needs an "
        "elementwise optimizer (SGD, Adam, AdamW, RMSprop, Adagrad); LBFGS is not one");
  }
  if (!optimizer.state().empty()) {
    throw ConfigError(
        "ZeRO: the optimizer already has state (it stepped before prepare()); prepare it "
        "before its first step");
  }
  std::vector<ShardLayout::Model> layouts;
  for (const auto& model : models_) layouts.push_back(ShardLayout::from_reducer(model->reducer()));
  layout_ = std::make_unique<ShardLayout>(optimizer, std::move(layouts));
  auto& groups = optimizer.param_groups();
  for (const auto& group : groups) {
    for (const at::Tensor& parameter : group.params()) {
      if (layout_->locate(parameter)) model_parameters_.push_back(parameter);
    }
  }
  // The groups hold the parameters no model syncs, then this process's runs.
  std::vector<std::vector<at::Tensor>> kept = layout_->unsynced();
  for (const ShardLayout::Run& run :
       layout_->runs_for(communicator_->rank(), communicator_->world_size())) {
    at::Tensor parameter = detail::storage_alias(models_[run.model]->parameter_buffer(run.bucket),
                                                 run.begin, {run.numel});
    parameter.set_requires_grad(true);
    kept[run.group].push_back(parameter);
    runs_.push_back(Run{run.model, run.bucket, run.begin, run.numel, parameter});
  }
  for (std::size_t g = 0; g < groups.size(); ++g) groups[g].params() = kept[g];
  before_step();  // bound from the start: unscale_ or a clip may come before any step
}

ShardedOptimizer::~ShardedOptimizer() = default;

void ShardedOptimizer::load_resharded(int saved_world, const std::string& manifest_path,
                                      const std::function<std::string(int)>& archive_of) {
  std::vector<StatePiece> pieces;
  for (const Run& run : runs_)
    pieces.push_back(StatePiece{run.model, run.bucket, run.begin, run.parameter});
  load_sharded_state(*layout_, saved_world, manifest_path, archive_of, optimizer_, pieces);
}

void ShardedOptimizer::before_step() {
  c10::NoGradGuard no_grad;
  for (Run& run : runs_) {
    ModelShards& model = *models_[run.model];
    const at::Tensor shard = model.reducer().gradient_shard(run.bucket);
    run.parameter.mutable_grad() =
        detail::storage_alias(shard, run.begin - model.shard_begin(run.bucket), {run.numel});
  }
}

void ShardedOptimizer::after_step(bool stepped) {
  if (!stepped) return;  // nothing changed, on any process (found_inf is shared)
  for (auto& model : models_) model->gather_parameters();
}

void ShardedOptimizer::zero_grad(bool set_to_none) {
  c10::NoGradGuard no_grad;
  for (const at::Tensor& parameter : model_parameters_) {
    at::Tensor& grad = parameter.mutable_grad();
    if (!grad.defined()) continue;
    if (set_to_none) {
      grad.reset();
    } else {
      grad.zero_();
    }
  }
  // The runs' gradients stay bound (a GradScaler::unscale_ before the next
  // step must find them); the shards they alias are zeroed or overwritten.
  for (auto& model : models_) model->reducer().clear_gradient_shards();
  before_step();
}

std::vector<at::Tensor> ShardedOptimizer::shard_gradients() {
  before_step();
  std::vector<at::Tensor> gradients;
  for (const Run& run : runs_) gradients.push_back(run.parameter.grad());
  return gradients;
}

double clip_grad_norm(Communicator& communicator, const std::vector<ShardedOptimizer*>& optimizers,
                      double max_norm, double norm_type) {
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> gradients;
  for (ShardedOptimizer* optimizer : optimizers) {
    for (const at::Tensor& gradient : optimizer->shard_gradients()) gradients.push_back(gradient);
  }
  const bool infinity = std::isinf(norm_type);
  at::Tensor local = at::zeros({1}, at::kDouble);
  for (const at::Tensor& gradient : gradients) {
    const at::Tensor magnitude = gradient.to(at::kDouble).abs();
    if (infinity) {
      local = at::maximum(local, magnitude.max().reshape({1}).cpu());
    } else {
      local += magnitude.pow(norm_type).sum().cpu();
    }
  }
  communicator.all_reduce(local, infinity ? ReduceOp::kMax : ReduceOp::kSum);
  const double total =
      infinity ? local.item<double>() : std::pow(local.item<double>(), 1.0 / norm_type);
  const double coefficient = max_norm / (total + 1e-6);
  if (coefficient < 1.0) {
    for (const at::Tensor& gradient : gradients) gradient.mul_(coefficient);
  }
  return total;
}

void clip_grad_value(const std::vector<ShardedOptimizer*>& optimizers, double clip_value) {
  c10::NoGradGuard no_grad;
  for (ShardedOptimizer* optimizer : optimizers) {
    for (const at::Tensor& gradient : optimizer->shard_gradients()) {
      gradient.clamp_(-clip_value, clip_value);
    }
  }
}

bool ShardedOptimizer::covers_any(const std::vector<at::Tensor>& parameters) const {
  for (const at::Tensor& parameter : parameters) {
    if (layout_->locate(parameter)) return true;
  }
  return false;
}

}  // namespace accelerate::sharding
