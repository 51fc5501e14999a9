// ZeRO's access to a GradientReducer (src/sharding uses it): partitioning
// the buckets so that each process owns a shard, reduce-scattering them,
// and the shards of averaged gradients. Programs do not call these; the
// reducer keeps them private and this struct is its friend. Internal.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "accelerate/parallel/gradient_reducer.h"

namespace accelerate::detail {

struct ShardedGradients {
  // Before the first backward: pads every bucket to a multiple of the number
  // of processes. kReplicated (stage 1) forces gradient_as_bucket_view, so
  // each bucket buffer holds the averaged gradients; kSharded (stages 2-3)
  // reduce-scatters each bucket instead of all-reducing it: after a synced
  // backward only gradient_shard(b) holds averages (this process's shard),
  // and the synced parameters' .grad are released. ConfigError with
  // comm_hook or find_unused_parameters. `unit_of` (stage 3, kSharded only):
  // each parameter's unit or -1; each unit's parameters fill buckets of
  // their own (src/parallel/bucket_assignment.h).
  static void partition_buckets(GradientReducer& reducer, GradientPartition partition,
                                const std::vector<int>& unit_of = {}) {
    reducer.partition_buckets(partition, unit_of);
  }
  static GradientPartition partition(const GradientReducer& reducer) { return reducer.partition(); }
  // Where parameter `index`'s gradient starts in its bucket (-1: frozen).
  static std::int64_t offset_in_bucket(const GradientReducer& reducer, std::size_t index) {
    return reducer.offset_in_bucket(index);
  }
  // This process's shard of bucket b's averaged gradients (valid after a
  // synced backward).
  static at::Tensor gradient_shard(GradientReducer& reducer, std::size_t bucket) {
    return reducer.gradient_shard(bucket);
  }
  // kSharded, as a unit's backward begins: the bucket's reduce-scatter
  // buffer now, with the parameters' .grad as views into it.
  static void begin_bucket_gradients(GradientReducer& reducer, std::size_t bucket) {
    reducer.begin_bucket_gradients(bucket);
  }
  // false: each bucket's reduce-scatter finishes before the next bucket's
  // gradients are computed (one bucket buffer alive at a time).
  // One process offloading: the reducer acts though it has nobody to reduce with.
  static void reduce_alone(GradientReducer& reducer) { reducer.reduce_alone(); }
  static void set_overlap_reduce_scatter(GradientReducer& reducer, bool overlap) {
    reducer.set_overlap_reduce_scatter(overlap);
  }
  // Hybrid sharding: the shard groups' replicas (GradientReducer::set_replica_communicator).
  static void set_replica_communicator(GradientReducer& reducer,
                                       std::shared_ptr<Communicator> replicas) {
    reducer.set_replica_communicator(std::move(replicas));
  }
  // Low-precision collectives: the dtype each reduce-scatter carries
  // (GradientReducer::set_reduce_scatter_wire).
  static void set_reduce_scatter_wire(GradientReducer& reducer,
                                      std::optional<at::ScalarType> wire) {
    reducer.set_reduce_scatter_wire(wire);
  }
  // ZeRO++ qgZ (or any other way to reduce-scatter a bucket):
  // GradientReducer::set_reduce_scatter. Replaces a wire dtype set above.
  static void set_reduce_scatter(GradientReducer& reducer,
                                 GradientReducer::ShardedReduceScatter reduce_scatter) {
    reducer.set_reduce_scatter(std::move(reduce_scatter));
  }
  // zero_grad for the shards.
  static void clear_gradient_shards(GradientReducer& reducer) { reducer.clear_gradient_shards(); }
};

}  // namespace accelerate::detail
