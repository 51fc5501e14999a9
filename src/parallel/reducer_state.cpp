#include "parallel/reducer_state.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <iostream>
#include <sstream>

#include "accelerate/common/errors.h"
#include "parallel/storage_alias.h"

namespace accelerate {

namespace {

double seconds_between(std::chrono::steady_clock::time_point from,
                       std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

std::string describe_shape(const at::Tensor& tensor) {
  std::ostringstream out;
  out << tensor.sizes();
  return out.str();
}

at::Tensor GradientReducer::State::bucket_view(std::size_t parameter_index) {
  const Slot& slot = slots[parameter_index];
  return detail::storage_alias(progress[slot.bucket].buffer, slot.offset,
                               parameters[parameter_index].sizes());
}

void GradientReducer::State::mark_ready(std::size_t parameter_index) {
  ready[parameter_index] = 1;
  --progress[slots[parameter_index].bucket].waiting_for;
}

namespace {

// Whether `grad` is exactly the bucket slice `view` (gradient_as_bucket_view
// after the first synced step, unless the user replaced or reset .grad).
bool is_bucket_view(const at::Tensor& grad, const at::Tensor& view) {
  return grad.is_alias_of(view) && grad.data_ptr() == view.data_ptr() &&
         grad.sizes() == view.sizes() && grad.strides() == view.strides() &&
         grad.scalar_type() == view.scalar_type();
}

}  // namespace

// Copies the bucket's gradients (zero where none) into its buffer, unless
// they already live there, and starts its all-reduce.
void GradientReducer::State::launch(std::size_t b) {
  if (b == 0) first_launch = Clock::now();
  c10::NoGradGuard no_grad;
  const bool views = progress[b].grads_are_views;
  const bool sharded = partition == GradientPartition::kSharded;
  if (sharded && !progress[b].buffer.defined()) {
    // A fresh buffer each step (unless begin_bucket_gradients made it and
    // the gradients are in it already): freed once its shard is reduced.
    const GradientBucket& bucket = buckets[b];
    // In shared memory where peers read it in place (no copy in the reduce-scatter).
    progress[b].buffer =
        communicator->reduce_scatter_buffer(bucket.padded_numel, progress[b].shard.options());
    progress[b].buffer.narrow(0, bucket.numel, bucket.padded_numel - bucket.numel).zero_();
  }
  for (std::size_t index : buckets[b].parameter_indices) {
    at::Tensor& grad = parameters[index].mutable_grad();
    at::Tensor view = bucket_view(index);
    if (grad.defined() && grad.layout() != at::kStrided) {
      throw Error("gradient sync: parameter " + std::to_string(index) +
                  " has a sparse gradient, which bucketed sync does not support");
    }
    if (grad.defined() && is_bucket_view(grad, view)) {  // accumulated in place
      if (sharded) grad.reset();  // the buffer holds it; freed below, as any copy
      continue;
    }
    if (grad.defined()) {
      view.copy_(grad);
    } else {
      view.zero_();
    }
    // Safe mid-backward: this parameter's AccumulateGrad has already run.
    if (views) grad = view;
    // Sharded: the full gradient is in the buffer now; freeing it here rather
    // than in finalize keeps one unit's worth alive at a time, not the model's.
    if (sharded) grad.reset();
  }
  // Compressed buckets are averaged before the sum (DDP's compress hooks):
  // a sum of N fp16 values could overflow where their mean does not.
  if (buckets[b].compressed) progress[b].buffer.div_(communicator->world_size());
  const std::string what = "gradient bucket " + std::to_string(b);
  if (partition == GradientPartition::kSharded) {
    // Straight into the shard, unless it holds an earlier sync's gradients
    // this step (several backward passes): those are added to in finalize.
    at::Tensor& into = shards_hold_gradients ? progress[b].arriving : progress[b].shard;
    if (shards_hold_gradients) into = at::empty_like(progress[b].shard);
    progress[b].collective =
        sharded_reduce_scatter
            ? sharded_reduce_scatter(*communicator, progress[b].buffer, into, what)
            : communicator->reduce_scatter_sum_async(progress[b].buffer, into, what);
    // Each sharded bucket's buffer is as large as its gradients: freeing
    // them only in finalize would keep the whole model's gradients alive at
    // the end of backward. With at most sharded_in_flight buffers in flight
    // (0: each waited for as it launches), the peak is a few buckets (ZeRO-3:
    // units) whatever the model's size.
    if (b >= sharded_in_flight) {
      BucketProgress& done = progress[b - sharded_in_flight];
      const Clock::time_point before = Clock::now();
      done.collective.wait();
      waited_in_backward += seconds_between(before, Clock::now());
      done.buffer = at::Tensor();
    }
    return;
  }
  progress[b].collective = communicator->all_reduce_sum_async(progress[b].buffer, what);
}

// Gloo matches collectives by issue order, so a complete bucket waits until
// every earlier bucket has started.
void GradientReducer::State::launch_ready_buckets(bool from_backward) {
  while (next_to_launch < buckets.size() && progress[next_to_launch].waiting_for == 0) {
    launch(next_to_launch);
    ++next_to_launch;
    if (from_backward) ++launched_during_backward;
  }
}

void GradientReducer::State::on_gradient_ready(std::size_t index) {
  detail::MutexLock lock(mutex);
  used_since_sync[index] = 1;
  reached_this_backward = true;
  if (!sync_enabled) return;
  if (ready[index]) {
    throw Error("gradient sync: parameter " + std::to_string(index) + " (shape " +
                describe_shape(parameters[index]) +
                ") got a gradient twice in one synced step: call finalize_backward() after "
                "every backward pass (Accelerator::backward does), and pass every output the "
                "backward starts from to prepare_for_backward()");
  }
  mark_ready(index);
  launch_ready_buckets(/*from_backward=*/true);
}

bool GradientReducer::State::step_in_progress() const {
  return next_to_launch > 0 || std::any_of(ready.begin(), ready.end(), [](char r) { return r; });
}

void GradientReducer::State::reset_step() {
  std::fill(ready.begin(), ready.end(), 0);
  std::fill(used_since_sync.begin(), used_since_sync.end(), 0);
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    progress[b].waiting_for = buckets[b].parameter_indices.size();
    progress[b].collective = PendingCollective();
  }
  next_to_launch = 0;
  launched_during_backward = 0;
  waited_in_backward = 0;
}

void GradientReducer::State::warn_once_about_unused() {
  if (options.find_unused_parameters() || unused_warnings > 0) return;
  std::vector<std::size_t> unused;
  std::size_t synced = 0;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].bucket < 0) continue;
    ++synced;
    if (!used_since_sync[i]) unused.push_back(i);
  }
  // No parameter at all: the backward pass did not reach this model (the
  // generator during the discriminator's pass in GAN training), which is not
  // the partial use this warning is about.
  if (unused.empty() || unused.size() == synced) return;
  constexpr std::size_t kNamed = 5;
  std::ostringstream message;
  message << "accelerate: warning: rank " << communicator->rank() << ": parameter"
          << (unused.size() > 1 ? "s " : " ");
  for (std::size_t k = 0; k < std::min(unused.size(), kNamed); ++k) {
    message << (k ? ", " : "") << unused[k] << " (shape " << describe_shape(parameters[unused[k]])
            << ")";
  }
  if (unused.size() > kNamed) message << " and " << unused.size() - kNamed << " more";
  message << " received no gradient since the last synced step; zero (or the existing .grad) "
             "was averaged in its place. If some parameters do not take part in every forward "
             "pass, set find_unused_parameters=true "
             "(GradientSyncOptions::find_unused_parameters). This warning is printed once.\n";
  std::cerr << message.str() << std::flush;
  ++unused_warnings;
}

// find_unused_parameters: which synced parameters got a gradient on at least
// one process since the last sync. Issued after every bucket, in the same
// order everywhere.
void GradientReducer::State::sum_shards_across_replicas() {
  std::vector<PendingCollective> sums;
  for (BucketProgress& bucket : progress) {
    at::Tensor& group_sum = bucket.arriving.defined() ? bucket.arriving : bucket.shard;
    // A dtype the backend cannot sum (bf16 on Gloo) goes through the
    // blocking all-reduce, which sums a widened copy.
    if (replicas->reduces_natively(group_sum.scalar_type(), group_sum.device())) {
      sums.push_back(replicas->all_reduce_sum_async(group_sum, "gradient shard (replicas)"));
    } else {
      replicas->all_reduce(group_sum, ReduceOp::kSum);
    }
  }
  for (PendingCollective& sum : sums) sum.wait();
}

PendingCollective GradientReducer::State::start_usage_exchange(at::Tensor* usage) {
  *usage = at::zeros({static_cast<std::int64_t>(slots.size())}, at::kFloat);
  float* data = usage->data_ptr<float>();
  for (std::size_t i = 0; i < slots.size(); ++i) data[i] = used_since_sync[i] ? 1.0f : 0.0f;
  return communicator->all_reduce_sum_async(*usage, "gradient usage map");
}

// Whatever happens in finalize_step(), the next step starts from a clean
// slate. (Not a guard object: its destructor would be a function that the
// thread-safety analysis cannot see holding `mutex`.)
void GradientReducer::State::finalize() {
  try {
    finalize_step();
  } catch (...) {
    reset_step();
    throw;
  }
  reset_step();
}

void GradientReducer::State::finalize_step() {
  const Clock::time_point start = Clock::now();
  warn_once_about_unused();
  const int during_backward = launched_during_backward;
  for (std::size_t b = next_to_launch; b < buckets.size(); ++b) progress[b].waiting_for = 0;
  launch_ready_buckets(/*from_backward=*/false);
  at::Tensor usage;
  PendingCollective usage_exchange;
  if (options.find_unused_parameters()) usage_exchange = start_usage_exchange(&usage);

  double waited = waited_in_backward;
  for (auto& bucket : progress) {
    const Clock::time_point before = Clock::now();
    bucket.collective.wait();
    waited += seconds_between(before, Clock::now());
  }
  const Clock::time_point before_usage = Clock::now();
  usage_exchange.wait();
  const Clock::time_point communication_done = Clock::now();
  waited += seconds_between(before_usage, communication_done);

  c10::NoGradGuard no_grad;
  const float* used_anywhere = usage.defined() ? usage.data_ptr<float>() : nullptr;
  if (replicas && partition == GradientPartition::kSharded) sum_shards_across_replicas();
  // Hybrid sharding averages over every process of the job: the group's
  // and its replicas' (set_replica_communicator).
  const int processes = communicator->world_size() * (replicas ? replicas->world_size() : 1);
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    // SUM, then divide: in place where the grads are the buffer's views,
    // else while copying back (one pass over the gradients either way, and
    // the same arithmetic, so results stay bit-identical).
    const at::Tensor world = at::scalar_tensor(
        static_cast<double>(processes),
        progress[b].shard.defined() ? progress[b].shard.options() : progress[b].buffer.options());
    if (partition == GradientPartition::kSharded) {
      // Only this process's shard is an average; the rest of the bucket and
      // the parameters' full gradients are not needed any more.
      if (progress[b].arriving.defined()) {
        progress[b].shard.add_(progress[b].arriving.div_(world));
        progress[b].arriving = at::Tensor();
      } else {
        progress[b].shard.div_(world);
      }
      progress[b].buffer = at::Tensor();
      for (std::size_t index : buckets[b].parameter_indices)
        parameters[index].mutable_grad().reset();
      continue;
    }
    if (progress[b].grads_are_views) {
      progress[b].buffer.div_(world);
      continue;
    }
    for (std::size_t index : buckets[b].parameter_indices) {
      // Left as it is, as DDP does: no process computed a gradient for it.
      if (used_anywhere != nullptr && used_anywhere[index] == 0.0f) continue;
      const at::Tensor& parameter = parameters[index];
      at::Tensor& grad = parameter.mutable_grad();
      if (!grad.defined()) grad = at::empty_like(parameter, at::MemoryFormat::Preserve);
      if (buckets[b].compressed) {
        grad.copy_(bucket_view(index));  // already divided before sending
      } else {
        at::div_out(grad, bucket_view(index), world);
      }
    }
  }

  if (partition == GradientPartition::kSharded) shards_hold_gradients = true;
  stats.synced_steps += 1;
  stats.bucket_count = static_cast<int>(buckets.size());
  stats.buckets_launched_during_backward = during_backward;
  stats.communication_seconds = seconds_between(first_launch, communication_done);
  stats.exposed_wait_seconds = waited;
  stats.finalize_seconds = seconds_between(start, Clock::now());
}

}  // namespace accelerate
