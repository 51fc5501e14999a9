#include "sharding/zero_optimizer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/module.h>
#include <torch/optim/lbfgs.h>

#include "accelerate/common/errors.h"
#include "checkpoint/optimizer_reshard.h"
#include "compat/optim_compat.h"
#include "parallel/sharded_gradients.h"
#include "parallel/state_broadcast.h"
#include "parallel/storage_alias.h"
#include "parallel/storage_release.h"

namespace accelerate::sharding {

std::unordered_map<const c10::TensorImpl*, std::size_t> bucketed_parameters(
    const GradientReducer& reducer) {
  std::unordered_map<const c10::TensorImpl*, std::size_t> out;
  for (const GradientBucket& bucket : reducer.buckets()) {
    for (std::size_t index : bucket.parameter_indices) {
      out[reducer.parameters()[index].unsafeGetTensorImpl()] = index;
    }
  }
  return out;
}

void broadcast_unbucketed_state(Communicator& communicator, torch::nn::Module& module,
                                const GradientReducer& reducer) {
  const auto bucketed = bucketed_parameters(reducer);
  std::vector<at::Tensor> state;
  for (const at::Tensor& parameter : module.parameters(true)) {
    if (bucketed.count(parameter.unsafeGetTensorImpl()) == 0) state.push_back(parameter);
  }
  for (const at::Tensor& buffer : module.buffers(true)) state.push_back(buffer);
  detail::broadcast_coalesced(communicator, state);
}

namespace {

// Host memory for `like`'s elements: pinned when `like` is on CUDA, so that
// copies to and from the device go by DMA, without a staging copy.
at::Tensor host_empty(const at::Tensor& like) {
  return at::empty(like.sizes(), like.options().device(at::kCPU).pinned_memory(like.is_cuda()));
}

}  // namespace

ModelShards::ModelShards(std::shared_ptr<Communicator> communicator, GradientReducer& reducer,
                         int stage, const std::vector<int>& unit_of, bool release_units,
                         Offload offload, std::optional<at::ScalarType> gather_dtype,
                         std::optional<QuantizedWire> quantized_gather)
    : communicator_(std::move(communicator)),
      reducer_(reducer),
      stage_(stage),
      gather_dtype_(quantized_gather ? std::nullopt : gather_dtype),
      quantized_gather_(quantized_gather) {
  if (stage < 1 || stage > 3)
    throw Error("ModelShards: stage 1, 2 or 3, got " + std::to_string(stage));
  const std::vector<at::Tensor>& parameters = reducer.parameters();
  for (const GradientBucket& bucket : reducer.buckets()) {
    if (bucket.device != parameters[bucket.parameter_indices.front()].device()) {
      throw ConfigError("ZeRO on CUDA needs the NCCL backend (this job's gradients of " +
                        bucket.device.str() + " parameters would be staged through the host)");
    }
  }
  detail::ShardedGradients::partition_buckets(
      reducer, stage == 1 ? GradientPartition::kReplicated : GradientPartition::kSharded,
      stage == 3 ? unit_of : std::vector<int>());
  c10::NoGradGuard no_grad;
  for (std::size_t b = 0; b < reducer.buckets().size(); ++b) {
    const GradientBucket& bucket = reducer.buckets()[b];
    const at::Tensor& first = parameters[bucket.parameter_indices.front()];
    at::Tensor buffer = at::zeros({bucket.padded_numel}, first.options().requires_grad(false));
    const bool from_process_zero = stage == 3;
    for (std::size_t index : bucket.parameter_indices) {
      const at::Tensor& parameter = parameters[index];
      const std::int64_t offset = detail::ShardedGradients::offset_in_bucket(reducer, index);
      if (!from_process_zero || communicator_->rank() == 0) {
        buffer.narrow(0, offset, parameter.numel()).copy_(parameter.detach().reshape({-1}));
      }
      // The parameter keeps its identity (autograd hooks, optimizer
      // references, the module's registration); only its memory moves.
      parameter.set_data(detail::storage_alias(buffer, offset, parameter.sizes()));
    }
    if (from_process_zero) communicator_->broadcast(buffer, 0);
    buffers_.push_back(buffer);
    at::Tensor shard = buffer.narrow(0, shard_begin(b), shard_numel(b));
    // A unit's buffer is freed between uses, so its shard needs memory of
    // its own; every other bucket stays whole, and its shard is a view of
    // it, as at stage 2.
    const bool unit_bucket =
        stage == 3 && !unit_of.empty() && unit_of.at(bucket.parameter_indices.front()) >= 0;
    const bool in_host = unit_bucket && offload.parameters;
    // A rounding gather writes every row of the buffer, this process's too:
    // the fp32 master the optimizer steps cannot be a view of it.
    const bool separate = !unit_bucket && lossy_gather(buffer.scalar_type());
    separate_master_.push_back(separate ? 1 : 0);
    shards_.push_back(in_host                   ? host_empty(shard).copy_(shard)
                      : unit_bucket || separate ? shard.clone()
                                                : shard);
    const bool stepped_in_host = in_host || offload.optimizer;
    host_parameters_.push_back(in_host           ? shards_.back()
                               : stepped_in_host ? host_empty(shard).copy_(shard)
                                                 : at::Tensor());
    host_gradients_.push_back(stepped_in_host ? host_empty(shard).zero_() : at::Tensor());
    // Last: `shard` is a view of the buffer.
    if (release_units && unit_bucket) detail::release_storage(buffer);
  }
  // Every process computes with the rounded weights from the first step on,
  // as it will after every later gather.
  if (rounds_gathers()) gather_parameters();
}

bool ModelShards::lossy_gather(at::ScalarType buffer_dtype) const {
  if (quantized_gather_) return at::isFloatingType(buffer_dtype);
  return gather_dtype_ && *gather_dtype_ != buffer_dtype;
}

bool ModelShards::rounds_gathers() const {
  for (const at::Tensor& buffer : buffers_) {
    if (lossy_gather(buffer.scalar_type())) return true;
  }
  return false;
}

std::optional<at::ScalarType> ModelShards::wire(std::size_t b) const {
  if (exact_gathers_ || !gather_dtype_ || *gather_dtype_ == buffers_[b].scalar_type())
    return std::nullopt;
  return gather_dtype_;
}

PendingCollective ModelShards::gather_over(Communicator& communicator, std::size_t b,
                                           const at::Tensor& source, const std::string& what,
                                           bool secondary) {
  if (quantized_gather_ && !secondary && !exact_gathers_ &&
      lossy_gather(buffers_[b].scalar_type())) {
    return quantized_all_gather(communicator, source, buffers_[b], what, *quantized_gather_);
  }
  const std::optional<at::ScalarType> dtype = wire(b);
  return dtype ? communicator.all_gather_into_async(source, buffers_[b], what, *dtype)
               : communicator.all_gather_into_async(source, buffers_[b], what);
}

void ModelShards::adopt_whole_weights() {
  c10::NoGradGuard no_grad;
  for (std::size_t b = 0; b < shards_.size(); ++b) {
    if (separate_master_[b])
      shards_[b].copy_(buffers_[b].narrow(0, shard_begin(b), shard_numel(b)));
  }
}

void ModelShards::adopt_gathered_weights() {
  c10::NoGradGuard no_grad;
  for (std::size_t b = 0; b < shards_.size(); ++b) {
    if (bucket_released(b) || shards_[b].is_alias_of(buffers_[b])) continue;
    shards_[b].copy_(buffers_[b].narrow(0, shard_begin(b), shard_numel(b)));
  }
}

bool ModelShards::shard_in_host(std::size_t b) const {
  return offloaded(b) && host_parameters_[b].is_same(shards_[b]);
}

bool ModelShards::mirrored(std::size_t b) const { return offloaded(b) && !shard_in_host(b); }

at::Tensor ModelShards::optimizer_shard(std::size_t b) const {
  return offloaded(b) ? host_parameters_[b] : shards_.at(b);
}

at::Tensor ModelShards::optimizer_gradient(std::size_t b) {
  return offloaded(b) ? host_gradients_[b] : detail::ShardedGradients::gradient_shard(reducer_, b);
}

void ModelShards::gradients_to_host() {
  for (std::size_t b = 0; b < host_gradients_.size(); ++b) {
    if (offloaded(b))
      host_gradients_[b].copy_(detail::ShardedGradients::gradient_shard(reducer_, b));
  }
}

void ModelShards::parameters_to_host() {
  for (std::size_t b = 0; b < shards_.size(); ++b) {
    if (mirrored(b)) host_parameters_[b].copy_(shards_[b]);
  }
}

// Copies to the device are synchronous: the host memory they read is
// written again on the CPU (the next step, a load) with nothing else to
// order the two.
void ModelShards::parameters_from_host() {
  for (std::size_t b = 0; b < shards_.size(); ++b) {
    if (mirrored(b)) shards_[b].copy_(host_parameters_[b]);
  }
}

void ModelShards::clear_host_gradients() {
  for (at::Tensor& gradient : host_gradients_) {
    if (gradient.defined()) gradient.zero_();
  }
}

at::Tensor ModelShards::gather_source(std::size_t b) {
  const at::Tensor& shard = shards_[b];
  if (!shard_in_host(b)) return shard;
  // The shard lives in host memory: into its slot of the buffer, which the
  // all-gather then fills in place around it.
  at::Tensor slot = buffers_[b].narrow(0, shard_begin(b), shard_numel(b));
  slot.copy_(shard);  // synchronous, as in parameters_from_host
  return slot;
}

std::int64_t ModelShards::shard_numel(std::size_t b) const {
  return reducer_.buckets().at(b).padded_numel / communicator_->world_size();
}

void ModelShards::gather_parameters() {
  for (std::size_t b = 0; b < gathering_.size(); ++b) {
    if (gathering_[b].valid()) gather_bucket(b);  // prefetched: finish it first
  }
  // Every caller has just changed the shards (a step, a load): hpZ's
  // copies hold the old parameters, and a gather from them would bring
  // those back (DeepSpeed's hpZ lost its loss that way).
  std::fill(secondary_current_.begin(), secondary_current_.end(), 0);
  std::vector<PendingCollective> pending;
  for (std::size_t b = 0; b < buffers_.size(); ++b) {
    if (bucket_released(b)) continue;
    pending.push_back(gather_over(*communicator_, b, gather_source(b),
                                  "ZeRO parameter gather of bucket " + std::to_string(b)));
  }
  for (PendingCollective& p : pending) p.wait();
  // The parameters changed in place behind autograd's back (through their
  // buffers): a graph saved before the step must notice, as it would
  // after an optimizer's in-place update.
  for (const at::Tensor& parameter : reducer_.parameters()) {
    if (parameter.requires_grad()) parameter.unsafeGetTensorImpl()->bump_version();
  }
}

void ModelShards::start_gather(std::size_t b) {
  if (!bucket_released(b)) return;  // gathered, or being gathered
  at::Tensor buffer = buffers_.at(b);
  detail::materialize_storage(buffer,
                              static_cast<std::size_t>(buffer.numel()) * buffer.element_size());
  gathering_.resize(buffers_.size());
  gathering_primary_.resize(buffers_.size());
  // Every process decides alike (the same gathers and steps ran on each),
  // so the collectives stay matched within the job and within each group.
  const bool secondary = secondary_group_ && secondary_current_[b];
  gathering_primary_[b] = !secondary;
  if (secondary) {
    ++gather_counts_.secondary;
    // A copy kept from a rounded gather rounds to itself: the same bits. A
    // quantized one would not (its blocks' scales could move by an ulp), so
    // qwZ's kept copies travel as they are, within the machine.
    gathering_[b] = gather_over(*secondary_group_, b, secondary_[b],
                                "ZeRO++ hpZ secondary gather of bucket " + std::to_string(b), true);
    return;
  }
  ++gather_counts_.primary;
  gathering_[b] = gather_over(*communicator_, b, gather_source(b),
                              "ZeRO-3 parameter gather of bucket " + std::to_string(b));
}

void ModelShards::gather_bucket(std::size_t b) {
  if (b < gathering_.size() && gathering_[b].valid()) {
    gathering_[b].wait();
    gathering_[b] = PendingCollective();
    if (secondary_group_ && gathering_primary_[b]) keep_secondary(b);
    return;
  }
  if (!bucket_released(b)) return;
  start_gather(b);
  gather_bucket(b);
}

void ModelShards::keep_secondary_copies(std::shared_ptr<Communicator> group) {
  if (group && world_size() % group->world_size() != 0) {
    throw Error("ZeRO++ hpZ: a group of " + std::to_string(group->world_size()) +
                " processes does not divide the " + std::to_string(world_size()) +
                " that shard the model");
  }
  secondary_group_ = std::move(group);
  secondary_.assign(buffers_.size(), at::Tensor());
  secondary_current_.assign(buffers_.size(), 0);
}

void ModelShards::keep_secondary(std::size_t b) {
  // The buffer is padded to a multiple of world_size(), so of the group's size.
  const at::Tensor& buffer = buffers_[b];
  const std::int64_t numel = buffer.numel() / secondary_group_->world_size();
  const at::Tensor part = buffer.narrow(0, secondary_group_->rank() * numel, numel);
  if (!secondary_[b].defined()) secondary_[b] = at::empty_like(part);
  secondary_[b].copy_(part);
  secondary_current_[b] = 1;
}

void ModelShards::release_bucket(std::size_t b) {
  // Never free memory a collective is still writing.
  if (b < gathering_.size() && gathering_[b].valid()) gather_bucket(b);
  detail::release_storage(buffers_.at(b));
}

bool ModelShards::bucket_released(std::size_t b) const {
  return detail::storage_released(buffers_.at(b));
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
    const ModelShards& model = *models_[run.model];
    at::Tensor parameter = detail::storage_alias(
        model.optimizer_shard(run.bucket), run.begin - model.shard_begin(run.bucket), {run.numel});
    parameter.set_requires_grad(true);
    kept[run.group].push_back(parameter);
    runs_.push_back(Run{run.model, run.bucket, run.begin, run.numel, parameter});
  }
  for (std::size_t g = 0; g < groups.size(); ++g) groups[g].params() = kept[g];
  bind_gradients();  // from the start: unscale_ or a clip may come before any step
}

ShardedOptimizer::~ShardedOptimizer() = default;

void ShardedOptimizer::load_resharded(int saved_world, const std::string& manifest_path,
                                      const std::function<std::string(int)>& archive_of) {
  std::vector<StatePiece> pieces;
  for (const Run& run : runs_)
    pieces.push_back(StatePiece{run.model, run.bucket, run.begin, run.parameter});
  load_sharded_state(*layout_, saved_world, manifest_path, archive_of, optimizer_, pieces);
}

void ShardedOptimizer::load_parameter_states(
    const torch::optim::Optimizer& from,
    const std::vector<std::vector<at::Tensor>>& from_parameters) {
  checkpoint::copy_group_options(from, optimizer_);
  for (const Run& run : runs_) compat::take_param_state(optimizer_, run.parameter);
  for (const Run& run : runs_) {
    const ShardLayout::Bucket& bucket = layout_->models()[run.model].buckets[run.bucket];
    for (std::size_t k = 0; k < bucket.parameters.size(); ++k) {
      const std::int64_t lo = std::max(run.begin, bucket.offsets[k]);
      const std::int64_t hi = std::min(run.begin + run.numel, bucket.offsets[k] + bucket.numels[k]);
      const at::Tensor& source = from_parameters.at(run.model).at(bucket.parameters[k]);
      if (lo >= hi || !source.defined()) continue;
      if (source.numel() != bucket.numels[k]) {
        throw Error("load_state: parameter " + std::to_string(bucket.parameters[k]) + " of model " +
                    std::to_string(run.model) + " has " + std::to_string(bucket.numels[k]) +
                    " elements here, its saved state " + std::to_string(source.numel()));
      }
      checkpoint::copy_state_slice(from, source, lo - bucket.offsets[k], optimizer_, run.parameter,
                                   lo - run.begin, hi - lo);
    }
  }
}

void ShardedOptimizer::before_step() {
  c10::NoGradGuard no_grad;
  for (auto& model : models_) model->parameters_to_host();
  bind_gradients();
}

void ShardedOptimizer::bind_gradients() {
  c10::NoGradGuard no_grad;
  for (Run& run : runs_) {
    ModelShards& model = *models_[run.model];
    const at::Tensor shard = model.optimizer_gradient(run.bucket);
    run.parameter.mutable_grad() =
        detail::storage_alias(shard, run.begin - model.shard_begin(run.bucket), {run.numel});
  }
}

void ShardedOptimizer::after_step(bool stepped) {
  if (!stepped) return;  // nothing changed, on any process (found_inf is shared)
  for (auto& model : models_) {
    model->parameters_from_host();
    model->gather_parameters();
  }
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
  for (auto& model : models_) {
    detail::ShardedGradients::clear_gradient_shards(model->reducer());
    model->clear_host_gradients();
  }
  bind_gradients();
}

std::vector<at::Tensor> ShardedOptimizer::shard_gradients() {
  bind_gradients();
  std::vector<at::Tensor> gradients;
  for (const Run& run : runs_) gradients.push_back(run.parameter.grad());
  return gradients;
}

std::vector<ShardedOptimizer::GradientPiece> ShardedOptimizer::shard_gradient_pieces() {
  bind_gradients();
  std::vector<GradientPiece> pieces;
  for (const Run& run : runs_) {
    const ShardLayout::Model& model = layout_->models()[run.model];
    const ShardLayout::Bucket& bucket = model.buckets[run.bucket];
    const at::Tensor gradient = run.parameter.grad();
    for (std::size_t i = 0; i < bucket.parameters.size(); ++i) {
      const at::Tensor& parameter = model.parameters[bucket.parameters[i]];
      const std::int64_t begin = std::max(bucket.offsets[i], run.begin);
      const std::int64_t end =
          std::min(bucket.offsets[i] + parameter.numel(), run.begin + run.numel);
      if (begin < end) {
        pieces.push_back({gradient.narrow(0, begin - run.begin, end - begin), parameter});
      }
    }
  }
  return pieces;
}

GradientNormParts shard_gradient_norm_parts(Communicator& communicator,
                                            const std::vector<ShardedOptimizer*>& optimizers,
                                            double norm_type, const IsTensorParallelPart& is_part) {
  GradientNormParts parts(norm_type);
  for (ShardedOptimizer* optimizer : optimizers) {
    if (!is_part) {
      for (const at::Tensor& gradient : optimizer->shard_gradients()) parts.add(gradient, false);
      continue;
    }
    for (const auto& piece : optimizer->shard_gradient_pieces()) {
      parts.add(piece.gradient, is_part(piece.parameter));
    }
  }
  parts.combine(communicator);
  return parts;
}

void scale_shard_gradients(const std::vector<ShardedOptimizer*>& optimizers, double factor) {
  c10::NoGradGuard no_grad;
  for (ShardedOptimizer* optimizer : optimizers) {
    for (const at::Tensor& gradient : optimizer->shard_gradients()) gradient.mul_(factor);
  }
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
