// Sums CPU tensors across the ranks of a one-machine job through a shared
// memory segment, instead of through Gloo over TCP loopback.
//
// Why: in a CPU data-parallel job every core is busy computing. A Gloo
// all-reduce then pays twice: each byte crosses the kernel twice per hop,
// stealing CPU from backward, and every ring hand-off waits until a Gloo
// thread gets a core (BasicNet on 2 cores: the 4.7 MB bucket stayed in flight
// ~28 ms and backward slowed by ~5 ms; docs/performance.md). Here each rank
// copies its tensor into its own slot once, sums a 1/N share of the elements
// straight from everyone's slots, and copies the other shares back: a few
// milliseconds of memory traffic and three waits per piece.
//
// Every element is summed by exactly one rank, always in rank order
// ((x0 + x1) + x2 ...), so all ranks end bitwise identical, however tensors
// are bucketed or cut into pieces. Waits sleep on futexes (spinning would
// steal the cores the peers compute on) and give up with an error after the
// job's timeout, as soon as a peer's process is gone or the peer failed or
// closed its communicator, or when this communicator is destroyed: never a
// hang.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include <ATen/core/Tensor.h>

namespace c10d {
class Store;
}

namespace accelerate {
namespace detail {

// One queued sum; wait() blocks until it is done and throws
// std::runtime_error with the reason when it failed.
class SharedMemoryOperation {
 public:
  SharedMemoryOperation(at::Tensor tensor, std::string what)
      : tensor(std::move(tensor)), what(std::move(what)) {}
  void wait();
  void finish(const std::string& error);  // by the worker thread

  const at::Tensor tensor;
  const std::string what;

 private:
  std::mutex mutex_;
  std::condition_variable done_changed_;
  bool done_ = false;
  std::string error_;
};

class SharedMemoryAllReduce {
 public:
  // Collective: every rank calls it with the job's store, also a rank that
  // does not want it (`wanted` false), so that all ranks agree. Returns null
  // on every rank, with *why_not set, when any rank does not want it, the
  // ranks do not share one machine (host, boot and IPC/mount/PID namespaces),
  // or any of them cannot create or map the segment (e.g. /dev/shm too
  // small). The segment's name is removed before this returns, so nothing
  // outlives the job. Throws when the store fails (a peer never arrived).
  static std::unique_ptr<SharedMemoryAllReduce> create(c10d::Store& store, int rank,
                                                       int world_size,
                                                       std::chrono::milliseconds timeout,
                                                       bool wanted, std::string* why_not);
  ~SharedMemoryAllReduce();
  SharedMemoryAllReduce(const SharedMemoryAllReduce&) = delete;
  SharedMemoryAllReduce& operator=(const SharedMemoryAllReduce&) = delete;

  // Contiguous dense CPU tensors of float, double, half, int32 or int64.
  static bool serves(const at::Tensor& tensor);

  // Queues an in-place SUM of `tensor` (which serves() accepts). Sums run
  // one at a time on a background thread in queue order, which must be the
  // same on every rank (as for any collective). `what` names it in errors.
  std::shared_ptr<SharedMemoryOperation> sum_async(const at::Tensor& tensor,
                                                   const std::string& what);

  struct Impl;

 private:
  explicit SharedMemoryAllReduce(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace detail
}  // namespace accelerate
