// The reducer's working state: where each gradient lives in the bucket
// buffers, which gradients are final this step, which buckets have started.
// Private to src/parallel.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/function.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "accelerate/distributed/communicator.h"
#include "accelerate/parallel/gradient_reducer.h"
#include "common/mutex.h"
#include "compat/autograd_compat.h"

namespace accelerate {

// Hooks run on autograd threads and finalize() on the caller's: `mutex`
// guards every member after it. The members before it are set up before the
// first backward pass (partition_buckets() included) and only read after.
struct GradientReducer::State {
  using Clock = std::chrono::steady_clock;

  struct Slot {
    int bucket = -1;  // -1: frozen, never synced
    std::int64_t offset = 0;
    compat::AutogradNodePtr accumulator;  // the tensor holds it only weakly
    std::uintptr_t hook_key = 0;
  };
  struct BucketProgress {
    at::Tensor buffer;             // kSharded: allocated per synced step, freed after it
    at::Tensor shard;              // kSharded: this process's averaged shard
    at::Tensor arriving;           // kSharded: where a sync's shard arrives while `shard` holds one
    bool grads_are_views = false;  // gradient_as_bucket_view applies here
    std::size_t waiting_for = 0;   // parameters not yet ready this step
    PendingCollective collective;
  };

  std::shared_ptr<Communicator> communicator;
  // Hybrid sharding: the processes holding this one's shard in the other
  // shard groups (set_replica_communicator); null otherwise.
  std::shared_ptr<Communicator> replicas;
  // kSharded: how each bucket is reduce-scattered (set_reduce_scatter:
  // low-precision or quantized wires); empty: the plain reduce-scatter.
  ShardedReduceScatter sharded_reduce_scatter;
  GradientSyncOptions options;
  std::vector<at::Tensor> parameters;
  std::vector<at::Tensor> buffers;
  std::vector<GradientBucket> buckets;
  std::vector<Slot> slots;
  GradientPartition partition = GradientPartition::kNone;

  mutable detail::Mutex mutex;
  // kSharded: the shards hold gradients since the last clear_gradient_shards()
  // (a later synced backward adds to them, as .grad accumulates).
  bool shards_hold_gradients GUARDED_BY(mutex) = false;
  // kSharded: buckets whose reduce-scatter may still run while later
  // buckets' gradients are computed (set_overlap_reduce_scatter).
  std::size_t sharded_in_flight GUARDED_BY(mutex) = 1;
  bool sync_enabled GUARDED_BY(mutex) = true;
  std::vector<char> ready GUARDED_BY(mutex);            // gradient final this synced step
  std::vector<char> used_since_sync GUARDED_BY(mutex);  // hook fired since the last sync
  // Whether any gradient hook fired in the backward pass under way / in the
  // one finalize_backward() last ended (synced or not).
  bool reached_this_backward GUARDED_BY(mutex) = false;
  bool reached_last_backward GUARDED_BY(mutex) = false;
  std::vector<BucketProgress> progress GUARDED_BY(mutex);
  std::size_t next_to_launch GUARDED_BY(mutex) = 0;  // buckets launch strictly in order
  int launched_during_backward GUARDED_BY(mutex) = 0;
  // kSharded: launches waiting for earlier buckets (seconds)
  double waited_in_backward GUARDED_BY(mutex) = 0;
  Clock::time_point first_launch GUARDED_BY(mutex);
  GradientSyncStats stats GUARDED_BY(mutex);
  int unused_warnings GUARDED_BY(mutex) = 0;

  // Set before any hook exists (GradientReducer::reduce_alone), then read only.
  bool alone_but_active = false;
  // Whether the reducer acts: more than one process, or ZeRO offload alone.
  bool distributed() const { return communicator->world_size() > 1 || alone_but_active; }
  // A parameter's slice of its bucket buffer, shaped like the parameter.
  at::Tensor bucket_view(std::size_t parameter_index) REQUIRES(mutex);
  void mark_ready(std::size_t parameter_index) REQUIRES(mutex);
  // Starts, in bucket order, every bucket whose gradients are all final.
  void launch_ready_buckets(bool from_backward) REQUIRES(mutex);
  // The gradient accumulator hook's work.
  void on_gradient_ready(std::size_t parameter_index) EXCLUDES(mutex);
  bool step_in_progress() const REQUIRES(mutex);
  void reset_step() REQUIRES(mutex);
  // Groups the parameters into buckets (per ZeRO-3 unit when `unit_of` is
  // given) and sizes each bucket's bookkeeping; before any backward pass.
  void lay_out_buckets(const std::vector<int>& unit_of) REQUIRES(mutex);
  // Launches what is left, waits, averages, writes .grad, records stats;
  // the next step starts from a clean slate even when this throws.
  void finalize() REQUIRES(mutex);

 private:
  void finalize_step() REQUIRES(mutex);  // finalize() without the reset
  void launch(std::size_t bucket) REQUIRES(mutex);
  void warn_once_about_unused() REQUIRES(mutex);
  PendingCollective start_usage_exchange(at::Tensor* usage) REQUIRES(mutex);
  // Hybrid sharding: adds the other groups' sums to each bucket's shard sum
  // of this step (the shard, or `arriving`), every bucket's all-reduce in
  // flight at once.
  void sum_shards_across_replicas() REQUIRES(mutex);
};

std::string describe_shape(const at::Tensor& tensor);

}  // namespace accelerate
