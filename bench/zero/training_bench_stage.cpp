// One stage of zero_training_bench: trains it and counts its bytes (what
// each rank holds between steps, device and host apart, and the rise within
// a step) and times.
#include <cstdint>
#include <set>

#include "compat/memory_compat.h"
#include "compat/optim_compat.h"
#include "parallel/sharded_gradients.h"
#include "sharding/parameter_units.h"
#include "zero/training_bench.h"

namespace zero_training_bench {

namespace {

void reset_peak() { accelerate::compat::reset_cpu_peak_bytes(); }

enum Place { kDevice = 0, kHost = 1 };

// Bytes of the distinct storages behind the tensors added, by where they
// live. A storage counts once, where it was first added.
struct StorageCounter {
  std::set<const void*> seen;
  double bytes[2] = {0, 0};
  static const void* key(const at::Tensor& tensor) {
    return tensor.defined() ? tensor.storage().data() : nullptr;
  }
  bool counted(const at::Tensor& tensor) const { return seen.count(key(tensor)) > 0; }
  // Returns the bytes it added.
  double add(const at::Tensor& tensor, Place place = kDevice) {
    const void* k = key(tensor);
    if (k == nullptr || !seen.insert(k).second) return 0;  // released, or counted
    const double n = static_cast<double>(tensor.storage().nbytes());
    bytes[place] += n;
    return n;
  }
};

// Parameters, gradients and optimizer state after a step. The model's own
// tensors, the reducer's gradient shards and stage 3's unit shards are the
// device's. What the optimizer steps is then either one of those (no
// offloading: the same storage, counted once) or a host copy ModelShards
// made for offloading (a storage of its own, which no model tensor shares);
// its gradients and state live beside it. On a CUDA job the host copies
// would be CPU tensors; on this CPU job both places are CPU memory, so the
// place is told by which tensors these are, not by their device.
void count_state(const Workload& workload, accelerate::Accelerator& accelerator,
                 const torch::optim::Optimizer& optimizer, Measured& out) {
  StorageCounter counter;
  for (const auto& p : workload.module->parameters()) {
    counter.add(p);
    counter.add(p.grad());
  }
  for (const auto& reducer : accelerator.reducers()) {
    if (accelerate::detail::ShardedGradients::partition(*reducer) !=
        accelerate::GradientPartition::kSharded)
      continue;
    for (std::size_t b = 0; b < reducer->buckets().size(); ++b)
      counter.add(accelerate::detail::ShardedGradients::gradient_shard(*reducer, b));
  }
  // Stage 3: a unit's shard is a tensor of its own (the buffer it came
  // from is freed between uses), unless its parameters are offloaded: then
  // the shard itself is the host tensor the optimizer steps. Every unit of
  // a model shares one ModelShards.
  for (torch::nn::Module* unit : workload.unit_modules) {
    const accelerate::sharding::ModelShards* shards = accelerate::sharding::unit_shards(*unit);
    if (shards == nullptr) continue;
    for (std::size_t b = 0; b < shards->reducer().buckets().size(); ++b) {
      const bool shard_in_host =
          shards->offloaded(b) && shards->optimizer_shard(b).is_same(shards->parameter_shard(b));
      if (!shard_in_host) counter.add(shards->parameter_shard(b));
    }
    break;
  }
  double host[3] = {0, 0, 0};  // parameters, gradients, optimizer state
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      const Place place = counter.counted(p) ? kDevice : kHost;
      host[0] += place == kHost ? counter.add(p, place) : 0;
      const double gradient = counter.add(p.grad(), place);
      host[1] += place == kHost ? gradient : 0;
      const auto* state = accelerate::compat::param_state(optimizer, p);
      if (state == nullptr) continue;
      // AdamW's state: exp_avg and exp_avg_sq (max_exp_avg_sq only with amsgrad).
      const auto& adam = static_cast<const torch::optim::AdamWParamState&>(*state);
      double moments = 0;
      for (const at::Tensor& moment : {adam.exp_avg(), adam.exp_avg_sq(), adam.max_exp_avg_sq()})
        moments += counter.add(moment, place);
      host[2] += place == kHost ? moments : 0;
    }
  }
  out.state_bytes = counter.bytes[kDevice] + counter.bytes[kHost];
  out.device_bytes = counter.bytes[kDevice];
  out.host_parameter_bytes = host[0];
  out.host_gradient_bytes = host[1];
  out.host_optimizer_bytes = host[2];
}

}  // namespace

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

Measured run_stage(accelerate::Communicator& comm, std::shared_ptr<accelerate::Communicator> owner,
                   const Settings& s, int stage) {
  accelerate::Accelerator accelerator(owner, stage_options(stage, s, comm.world_size()));
  Workload workload = make_workload(s, comm.rank());
  torch::nn::Module& model = *workload.module;
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model.parameters(),
                                                       torch::optim::AdamWOptions(1e-4));
  accelerator.prepare(model, optimizer);
  std::vector<double> step, forward, backward, optimizer_step;
  double in_flight = 0, exposed = 0;
  double rise[3] = {0, 0, 0}, activations = 0, shared_bytes = 0;
  for (int i = 0; i < s.steps + 2; ++i) {  // two warm-up steps
    comm.barrier();
    const std::int64_t start_bytes = accelerate::compat::cpu_live_bytes();
    reset_peak();
    comm.reset_shared_buffer_peak();
    const Clock::time_point start = Clock::now();
    at::Tensor loss = workload.loss();
    const Clock::time_point forwarded = Clock::now();
    const std::int64_t forward_bytes = accelerate::compat::cpu_live_bytes();
    const std::int64_t forward_peak = accelerate::compat::cpu_peak_bytes();
    reset_peak();
    accelerator.backward(loss);
    const Clock::time_point backwarded = Clock::now();
    const std::int64_t backward_peak = accelerate::compat::cpu_peak_bytes();
    reset_peak();
    optimizer.step();
    optimizer.zero_grad();
    const Clock::time_point end = Clock::now();
    const std::int64_t optimizer_peak = accelerate::compat::cpu_peak_bytes();
    loss = at::Tensor();
    if (i < 2) continue;
    using Ms = std::chrono::duration<double, std::milli>;
    step.push_back(Ms(end - start).count());
    forward.push_back(Ms(forwarded - start).count());
    backward.push_back(Ms(backwarded - forwarded).count());
    optimizer_step.push_back(Ms(end - backwarded).count());
    const std::int64_t peaks[3] = {forward_peak, backward_peak, optimizer_peak};
    for (int phase = 0; phase < 3; ++phase)
      rise[phase] = std::max(rise[phase], double(peaks[phase] - start_bytes));
    activations = std::max(activations, double(forward_bytes - start_bytes));
    shared_bytes = std::max(shared_bytes, double(comm.shared_buffer_usage().peak_in_use));
    for (const auto& reducer : accelerator.reducers()) {
      const accelerate::GradientSyncStats stats = reducer->last_step_stats();
      in_flight += stats.communication_seconds * 1e3 / s.steps;
      exposed += stats.exposed_wait_seconds * 1e3 / s.steps;
    }
  }
  const double live_bytes = static_cast<double>(accelerate::compat::cpu_live_bytes()) +
                            static_cast<double>(comm.shared_buffer_usage().reserved);
  Measured state;
  count_state(workload, accelerator, optimizer, state);
  // The slowest rank's (largest) of each.
  at::Tensor all =
      at::tensor({state.state_bytes, live_bytes, rise[0], rise[1], rise[2], activations,
                  median(step), median(forward), median(backward), median(optimizer_step),
                  in_flight, exposed, shared_bytes, state.device_bytes, state.host_parameter_bytes,
                  state.host_gradient_bytes, state.host_optimizer_bytes},
                 at::kDouble);
  comm.all_reduce(all, accelerate::ReduceOp::kMax);
  const double* v = all.data_ptr<double>();
  Measured m;
  m.state_bytes = v[0];
  m.live_bytes = v[1];
  m.forward_peak_rise = v[2];
  m.backward_peak_rise = v[3];
  m.optimizer_peak_rise = v[4];
  m.activation_bytes = v[5];
  m.step_ms = v[6];
  m.forward_ms = v[7];
  m.backward_ms = v[8];
  m.optimizer_ms = v[9];
  m.reduce_in_flight_ms = v[10];
  m.reduce_exposed_ms = v[11];
  m.shared_bytes = v[12];
  m.device_bytes = v[13];
  m.host_parameter_bytes = v[14];
  m.host_gradient_bytes = v[15];
  m.host_optimizer_bytes = v[16];
  return m;
}

}  // namespace zero_training_bench
