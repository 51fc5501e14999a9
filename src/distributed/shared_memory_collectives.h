// Collectives on CPU tensors across the ranks of a one-machine job through a
// shared memory segment, instead of through Gloo over TCP loopback: the sum
// (all-reduce) of gradient buckets, and for sharded training the
// reduce-scatter and all-gather of flat buffers.
//
// Why: in a CPU data-parallel job every core is busy computing. A Gloo
// all-reduce then pays twice: each byte crosses the kernel twice per hop,
// stealing CPU from backward, and every ring hand-off waits until a Gloo
// thread gets a core (BasicNet on 2 cores: the 4.7 MB bucket stayed in flight
// ~28 ms and backward slowed by ~5 ms; docs/performance.md). Here each rank
// copies its tensor into its own slot once, sums a 1/N share of the elements
// straight from everyone's slots, and copies the other shares back: a few
// milliseconds of memory traffic and three waits per piece. A reduce-scatter
// is the first half of that (each rank sums its own shard and keeps it), an
// all-gather the copies alone. A reduce-scatter whose input lies in this
// rank's SharedBufferPool (shared_buffer()) is not copied at all: peers read
// it in place, and the rank waits until all of them have before its
// collective is done, so that the caller may then overwrite it.
//
// Every element is summed by exactly one rank, always in rank order
// ((x0 + x1) + x2 ...), so all ranks end bitwise identical, however tensors
// are bucketed or cut into pieces, and a reduce-scatter's shard equals the
// same elements of an all-reduce bitwise. Waits sleep on futexes (spinning
// would steal the cores the peers compute on) and give up with an error after
// the job's timeout, as soon as a peer's process is gone or the peer failed or
// closed its communicator, or when this communicator is destroyed: never a
// hang.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include "common/mutex.h"

namespace c10d {
class Store;
}

namespace accelerate {
namespace detail {

class SharedBufferPool;

enum class SharedMemoryKind {
  kSum,            // in place: `input` is also the output
  kReduceScatter,  // `output` (n elements) = sum of every rank's `input` [rank*n, (rank+1)*n)
  kAllGather,      // `output` [r*n, (r+1)*n) = rank r's `input` (n elements)
};

// One queued collective; wait() blocks until it is done and throws
// std::runtime_error with the reason when it failed.
class SharedMemoryOperation {
 public:
  SharedMemoryOperation(SharedMemoryKind kind, at::Tensor input, at::Tensor output,
                        std::string what)
      : kind(kind), input(std::move(input)), output(std::move(output)), what(std::move(what)) {}
  void wait() EXCLUDES(mutex_);
  // By the worker thread. Drops the tensors first, so that a buffer the
  // caller frees after wait() is free at once (and reused by the next step).
  void finish(const std::string& error) EXCLUDES(mutex_);

  const SharedMemoryKind kind;
  at::Tensor input;
  at::Tensor output;
  const std::string what;

 private:
  Mutex mutex_;
  CondVar done_changed_;
  bool done_ GUARDED_BY(mutex_) = false;
  std::string error_ GUARDED_BY(mutex_);
};

class SharedMemoryCollectives {
 public:
  // Collective: every rank calls it with the job's store, also a rank that
  // does not want it (`wanted` false), so that all ranks agree. Returns null
  // on every rank, with *why_not set, when any rank does not want it, the
  // ranks do not share one machine (host, boot and IPC/mount/PID namespaces),
  // or any of them cannot create or map the segment (e.g. /dev/shm too
  // small). The segment's name is removed before this returns, so nothing
  // outlives the job. Throws when the store fails (a peer never arrived).
  static std::unique_ptr<SharedMemoryCollectives> create(c10d::Store& store, int rank,
                                                         int world_size,
                                                         std::chrono::milliseconds timeout,
                                                         bool wanted, std::string* why_not);
  ~SharedMemoryCollectives();
  SharedMemoryCollectives(const SharedMemoryCollectives&) = delete;
  SharedMemoryCollectives& operator=(const SharedMemoryCollectives&) = delete;

  // Contiguous dense CPU tensors of float, double, half, int32 or int64 (the
  // dtypes summed); an all-gather moves any contiguous dense CPU tensor.
  static bool serves(const at::Tensor& tensor);
  static bool serves_dtype(at::ScalarType dtype);
  static bool moves(const at::Tensor& tensor);

  // Queue a collective. They run one at a time on a background thread in
  // queue order, which must be the same on every rank (as for any
  // collective). `what` names it in errors. The tensors must stay alive and
  // untouched until wait() returned.
  // In-place SUM of `tensor` (which serves() accepts).
  std::shared_ptr<SharedMemoryOperation> sum_async(const at::Tensor& tensor,
                                                   const std::string& what);
  // `shard` = the rank-ordered sum of this rank's shard of every rank's
  // `input`; input.numel() == world_size * shard.numel(), same dtype, served.
  std::shared_ptr<SharedMemoryOperation> reduce_scatter_async(const at::Tensor& input,
                                                              const at::Tensor& shard,
                                                              const std::string& what);
  // An uninitialised CPU tensor of `numel` elements in shared memory, for a
  // reduce-scatter's input: peers then read it in place instead of this
  // rank copying it into the segment. Undefined when none can be had
  // (SharedBufferPool's limits, a full /dev/shm). Any rank may use one, or
  // not, independently of its peers.
  at::Tensor shared_buffer(std::int64_t numel, const at::TensorOptions& options);
  SharedBufferPool& buffer_pool();
  // `output` = every rank's `shard` in rank order; output.numel() ==
  // world_size * shard.numel(), same dtype, moves() both.
  std::shared_ptr<SharedMemoryOperation> all_gather_async(const at::Tensor& shard,
                                                          const at::Tensor& output,
                                                          const std::string& what);

  struct Impl;

 private:
  explicit SharedMemoryCollectives(std::unique_ptr<Impl> impl);
  std::shared_ptr<SharedMemoryOperation> enqueue(std::shared_ptr<SharedMemoryOperation> operation);
  std::unique_ptr<Impl> impl_;
};

}  // namespace detail
}  // namespace accelerate
