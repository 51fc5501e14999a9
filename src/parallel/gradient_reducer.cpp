#include "accelerate/parallel/gradient_reducer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <utility>

#include "accelerate/common/errors.h"
#include "parallel/autograd_reach.h"
#include "parallel/bucket_assignment.h"
#include "parallel/reducer_state.h"
#include "parallel/state_broadcast.h"

namespace accelerate {

namespace {

// One line per parameter that every process must agree on; compared once at
// construction, because a mismatch would otherwise hang or mix up gradients.
std::string parameter_signature(const std::vector<at::Tensor>& parameters) {
  std::ostringstream out;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const at::Tensor& p = parameters[i];
    out << i << ' ' << describe_shape(p) << ' ' << c10::toString(p.scalar_type()) << ' '
        << (p.requires_grad() ? "trainable" : "frozen") << '\n';
  }
  return out.str();
}

std::string first_difference(const std::string& mine, const std::string& theirs) {
  std::istringstream a(mine), b(theirs);
  std::string line_a, line_b;
  while (true) {
    const bool more_a = static_cast<bool>(std::getline(a, line_a));
    const bool more_b = static_cast<bool>(std::getline(b, line_b));
    if (!more_a && !more_b) return "";
    if (!more_a) return "more parameters, starting with \"" + line_b + "\"";
    if (!more_b) return "fewer parameters (this process also has \"" + line_a + "\")";
    if (line_a != line_b) return "\"" + line_b + "\" where this process has \"" + line_a + "\"";
  }
}

// A bucket's buffer lives where the backend can reduce it: CUDA buffers need
// NCCL; without it they are staged in host memory and reduced by Gloo. One
// process (a reducer acting alone, reduce_alone) reduces with nobody: its
// buffers stay beside the parameters.
c10::Device buffer_device_for(const Communicator& communicator, c10::Device parameter_device) {
  if (parameter_device.is_cuda() && communicator.world_size() > 1 &&
      communicator.job().backend != Backend::kNccl) {
    return c10::kCPU;
  }
  return parameter_device;
}

}  // namespace

double GradientSyncStats::hidden_fraction() const {
  if (communication_seconds <= 0) return 0;
  return std::clamp(1.0 - exposed_wait_seconds / communication_seconds, 0.0, 1.0);
}

namespace {

// Tells the reducer that a parameter's .grad is final for this backward.
// AccumulateGrad runs its post hooks after it has updated .grad.
class GradientReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradientReadyHook(std::function<void()> ready) : ready_(std::move(ready)) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    ready_();
    return outputs;
  }

 private:
  std::function<void()> ready_;  // the reducer's on_gradient_ready for one parameter
};

}  // namespace

// Groups the parameters into buckets (per ZeRO-3 unit when `unit_of` is
// given) and sizes each bucket's bookkeeping; before any backward pass.
void GradientReducer::State::lay_out_buckets(const std::vector<int>& unit_of) {
  const Communicator& comm = *communicator;
  buckets = detail::assign_buckets(
      parameters, detail::bucket_caps_from(options),
      [&comm](c10::Device d) { return buffer_device_for(comm, d); }, options.comm_hook(), unit_of);
  for (const GradientBucket& bucket : buckets) {
    if (bucket.compressed && !comm.reduces_natively(bucket.wire_dtype, bucket.device)) {
      throw ConfigError(std::string("comm_hook compresses gradients to ") +
                        c10::toString(bucket.wire_dtype) +
                        ", which this job's backend cannot all-reduce (Gloo has no bf16 sum); "
                        "use CommHook::kFp16, or NCCL on CUDA");
    }
  }

  // Regrouping keeps each slot's accumulator and hook: only its place changes.
  slots.resize(parameters.size());
  for (auto& slot : slots) slot.bucket = -1, slot.offset = 0;
  progress.assign(buckets.size(), BucketProgress());
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    std::int64_t offset = 0;
    for (std::size_t index : buckets[b].parameter_indices) {
      slots[index].bucket = static_cast<int>(b);
      slots[index].offset = offset;
      offset += parameters[index].numel();
    }
    buckets[b].numel = buckets[b].padded_numel = offset;
    const auto where = at::TensorOptions().dtype(buckets[b].wire_dtype).device(buckets[b].device);
    progress[b].buffer = at::empty({offset}, where);
    const GradientBucket& bucket = buckets[b];
    const at::Tensor& first = parameters[bucket.parameter_indices.front()];
    progress[b].grads_are_views = options.gradient_as_bucket_view() &&
                                  !options.find_unused_parameters() && !bucket.compressed &&
                                  bucket.wire_dtype == bucket.gradient_dtype &&
                                  bucket.device == first.device();
  }
}

GradientReducer::GradientReducer(std::shared_ptr<Communicator> communicator,
                                 std::vector<at::Tensor> parameters, GradientSyncOptions options,
                                 std::vector<at::Tensor> buffers)
    : state_(std::make_unique<State>()) {
  if (!communicator) throw Error("GradientReducer needs a communicator");
  State& s = *state_;
  s.communicator = std::move(communicator);
  s.options = std::move(options);
  s.parameters = std::move(parameters);
  s.buffers = std::move(buffers);
  // No lock: no hook exists yet, so no other thread can reach `s` (clang's
  // thread-safety analysis leaves constructors unchecked for that reason).
  s.lay_out_buckets({});
  const Communicator& comm = *s.communicator;
  s.ready.assign(s.parameters.size(), 0);
  s.used_since_sync.assign(s.parameters.size(), 0);
  s.reset_step();
  if (!s.distributed()) return;
  install_hooks();
}

void GradientReducer::reduce_alone() {
  State& s = *state_;
  if (s.distributed()) return;
  s.alone_but_active = true;
  install_hooks();
}

void GradientReducer::install_hooks() {
  State& s = *state_;
  const Communicator& comm = *s.communicator;
  const std::string mine = parameter_signature(s.parameters);
  const auto everyone = s.communicator->all_gather_bytes(mine);
  for (std::size_t r = 0; r < everyone.size(); ++r) {
    if (everyone[r] != mine) {
      throw Error("gradient sync: rank " + std::to_string(comm.rank()) + " and rank " +
                  std::to_string(r) + " registered different parameters: rank " +
                  std::to_string(r) + " has " + first_difference(mine, everyone[r]));
    }
  }
  // Every accumulator first, hooks after: a constructor that throws runs no
  // destructor, so no hook may exist yet when it does.
  for (std::size_t index = 0; index < s.parameters.size(); ++index) {
    State::Slot& slot = s.slots[index];
    if (slot.bucket < 0) continue;
    slot.accumulator = torch::autograd::impl::grad_accumulator(s.parameters[index]);
    if (!slot.accumulator) {
      throw Error("gradient sync: parameter " + std::to_string(index) +
                  " is not a leaf tensor (it has a grad_fn); pass the module's parameters");
    }
  }
  for (std::size_t index = 0; index < s.parameters.size(); ++index) {
    State::Slot& slot = s.slots[index];
    if (!slot.accumulator) continue;
    slot.hook_key = slot.accumulator->add_post_hook(std::make_unique<GradientReadyHook>(
        [state = &s, index] { state->on_gradient_ready(index); }));
  }
}

std::unique_ptr<GradientReducer> GradientReducer::for_module(
    std::shared_ptr<Communicator> communicator, torch::nn::Module& module,
    GradientSyncOptions options) {
  return std::make_unique<GradientReducer>(std::move(communicator), module.parameters(true),
                                           std::move(options), module.buffers(true));
}

GradientReducer::~GradientReducer() {
  for (auto& slot : state_->slots) {
    if (slot.accumulator) slot.accumulator->del_post_hook(slot.hook_key);
  }
}

void GradientReducer::prepare_for_backward(const std::vector<at::Tensor>& outputs) {
  State& s = *state_;
  if (!s.distributed() || !s.options.find_unused_parameters()) return;
  const auto reachable = detail::nodes_reachable_from(outputs);
  detail::MutexLock lock(s.mutex);
  if (!s.sync_enabled) return;
  for (std::size_t index = 0; index < s.slots.size(); ++index) {
    const State::Slot& slot = s.slots[index];
    if (slot.bucket >= 0 && !s.ready[index] && reachable.count(slot.accumulator.get()) == 0) {
      s.mark_ready(index);
    }
  }
  s.launch_ready_buckets(/*from_backward=*/true);
}

void GradientReducer::finalize_backward() {
  State& s = *state_;
  if (!s.distributed()) return;
  detail::MutexLock lock(s.mutex);
  s.reached_last_backward = std::exchange(s.reached_this_backward, false);
  if (!s.sync_enabled) return;
  s.finalize();
}

void GradientReducer::set_sync_enabled(bool enabled) {
  State& s = *state_;
  detail::MutexLock lock(s.mutex);
  if (enabled == s.sync_enabled) return;
  if (s.step_in_progress()) {
    throw Error("gradient sync: set_sync_enabled(" + std::string(enabled ? "true" : "false") +
                ") during a synced backward pass; call finalize_backward() first");
  }
  s.sync_enabled = enabled;
}

bool GradientReducer::sync_enabled() const {
  detail::MutexLock lock(state_->mutex);
  return state_->sync_enabled;
}

bool GradientReducer::broadcast_buffers() {
  State& s = *state_;
  if (!s.options.broadcast_buffers()) return false;
  detail::broadcast_coalesced(*s.communicator, s.buffers);
  return true;
}

bool GradientReducer::broadcast_buffers_after_backward() {
  State& s = *state_;
  if (!s.distributed() || !s.options.broadcast_buffers() || s.buffers.empty()) return false;
  // Every process must decide alike: broadcast only where every one's last
  // backward reached this model (one small all-reduce).
  bool reached_here = false;
  {
    detail::MutexLock lock(s.mutex);
    reached_here = s.reached_last_backward;
  }
  at::Tensor reached =
      at::full({1}, reached_here ? 1.0f : 0.0f,
               at::TensorOptions().dtype(at::kFloat).device(s.buffers.front().device()));
  s.communicator->all_reduce(reached, ReduceOp::kMin);
  if (reached.item<float>() < 1.0f) return false;
  return broadcast_buffers();
}

void GradientReducer::partition_buckets(GradientPartition partition,
                                        const std::vector<int>& unit_of) {
  State& s = *state_;
  detail::MutexLock lock(s.mutex);
  if (partition == s.partition && unit_of.empty()) return;
  if (s.partition != GradientPartition::kNone || s.step_in_progress()) {
    throw Error("gradient sync: partition_buckets() once, before the first backward pass");
  }
  if (s.options.comm_hook() != CommHook::kNone) {
    throw ConfigError("ZeRO sharding does not support comm_hook (gradient compression) yet");
  }
  if (s.options.find_unused_parameters()) {
    throw ConfigError(
        "ZeRO sharding does not support find_unused_parameters yet: parameters without a "
        "gradient are averaged as zero (leave find_unused_parameters off)");
  }
  for (const GradientBucket& bucket : s.buckets) {
    if (bucket.wire_dtype != bucket.gradient_dtype) {
      throw ConfigError(std::string("ZeRO sharding needs float32 or float64 parameters, got ") +
                        c10::toString(bucket.gradient_dtype) +
                        " ones (keep fp32 parameters; bf16 autocast is fine)");
    }
  }
  if (!unit_of.empty()) {
    if (partition != GradientPartition::kSharded) {
      throw Error("gradient sync: units (ZeRO stage 3) need GradientPartition::kSharded");
    }
    s.lay_out_buckets(unit_of);
    s.reset_step();
  }
  const std::int64_t world = s.communicator->world_size();
  const std::int64_t rank = s.communicator->rank();
  s.partition = partition;
  for (std::size_t b = 0; b < s.buckets.size(); ++b) {
    GradientBucket& bucket = s.buckets[b];
    bucket.padded_numel = (bucket.numel + world - 1) / world * world;
    State::BucketProgress& progress = s.progress[b];
    // Zeros: the padding is summed with everything else and must stay 0.
    progress.buffer = at::zeros({bucket.padded_numel}, progress.buffer.options());
    if (partition == GradientPartition::kReplicated) {
      progress.grads_are_views =
          bucket.device == s.parameters[bucket.parameter_indices.front()].device();
      const std::int64_t n = bucket.padded_numel / world;
      progress.shard = progress.buffer.narrow(0, rank * n, n);
    } else {
      progress.grads_are_views = false;
      progress.shard = at::zeros({bucket.padded_numel / world}, progress.buffer.options());
      progress.buffer = at::Tensor();  // allocated when the bucket launches
    }
  }
}

GradientPartition GradientReducer::partition() const { return state_->partition; }

std::int64_t GradientReducer::offset_in_bucket(std::size_t parameter_index) const {
  const State::Slot& slot = state_->slots.at(parameter_index);
  return slot.bucket < 0 ? -1 : slot.offset;
}

at::Tensor GradientReducer::gradient_shard(std::size_t bucket) {
  if (state_->partition == GradientPartition::kNone) {
    throw Error("gradient sync: gradient_shard() needs partition_buckets()");
  }
  detail::MutexLock lock(state_->mutex);
  return state_->progress.at(bucket).shard;
}

void GradientReducer::set_overlap_reduce_scatter(bool overlap) {
  detail::MutexLock lock(state_->mutex);
  state_->sharded_in_flight = overlap ? 1 : 0;
}

void GradientReducer::set_replica_communicator(std::shared_ptr<Communicator> replicas) {
  if (state_->partition != GradientPartition::kSharded) {
    throw Error(
        "set_replica_communicator: only sharded gradients (ZeRO stage 2 or 3) have replicas");
  }
  state_->replicas = std::move(replicas);
}

void GradientReducer::set_reduce_scatter_wire(std::optional<at::ScalarType> wire) {
  if (state_->partition != GradientPartition::kSharded) {
    throw Error(
        "set_reduce_scatter_wire: only sharded gradients (ZeRO stage 2 or 3) are reduce-scattered");
  }
  if (!wire) {
    state_->sharded_reduce_scatter = nullptr;
    return;
  }
  const at::ScalarType dtype = *wire;
  set_reduce_scatter([dtype](Communicator& communicator, const at::Tensor& buffer,
                             at::Tensor& shard, const std::string& what) {
    return communicator.reduce_scatter_sum_async(buffer, shard, what, dtype);
  });
}

void GradientReducer::set_reduce_scatter(ShardedReduceScatter reduce_scatter) {
  if (state_->partition != GradientPartition::kSharded) {
    throw Error(
        "set_reduce_scatter: only sharded gradients (ZeRO stage 2 or 3) are reduce-scattered");
  }
  state_->sharded_reduce_scatter = std::move(reduce_scatter);
}

void GradientReducer::begin_bucket_gradients(std::size_t b) {
  State& s = *state_;
  detail::MutexLock lock(s.mutex);
  if (s.partition != GradientPartition::kSharded || !s.sync_enabled || !s.distributed()) return;
  const GradientBucket& bucket = s.buckets.at(b);
  State::BucketProgress& progress = s.progress[b];
  if (s.next_to_launch > b || progress.buffer.defined()) return;
  if (bucket.compressed || bucket.wire_dtype != bucket.gradient_dtype) return;
  c10::NoGradGuard no_grad;
  progress.buffer =
      s.communicator->reduce_scatter_buffer(bucket.padded_numel, progress.shard.options()).zero_();
  for (std::size_t index : bucket.parameter_indices) {
    at::Tensor view = s.bucket_view(index);
    at::Tensor& grad = s.parameters[index].mutable_grad();
    if (grad.defined()) view.copy_(grad);
    grad = view;
  }
}

void GradientReducer::clear_gradient_shards() {
  State& s = *state_;
  detail::MutexLock lock(s.mutex);
  if (s.partition != GradientPartition::kSharded) return;
  s.shards_hold_gradients = false;
  for (auto& progress : s.progress) progress.shard.zero_();
}

const std::vector<at::Tensor>& GradientReducer::parameters() const { return state_->parameters; }

const GradientSyncOptions& GradientReducer::options() const { return state_->options; }

const std::vector<GradientBucket>& GradientReducer::buckets() const { return state_->buckets; }

GradientSyncStats GradientReducer::last_step_stats() const {
  detail::MutexLock lock(state_->mutex);
  GradientSyncStats stats = state_->stats;
  stats.bucket_count = static_cast<int>(state_->buckets.size());
  return stats;
}

int GradientReducer::unused_parameter_warnings() const {
  detail::MutexLock lock(state_->mutex);
  return state_->unused_warnings;
}

}  // namespace accelerate
