// Communicator: this process's connection to its peers. It owns the
// rendezvous store and the c10d process groups (Gloo for CPU tensors, NCCL for
// CUDA tensors when LibTorch has it), and offers the primitive collectives the
// rest of the library builds on. In a one-process job it connects to nothing
// and every collective is the identity.
//
// Failures never hang past the job's timeout: a collective that fails (a peer
// did not arrive in time, a connection broke) throws DistributedError naming
// this rank, the operation and what each peer reported (see docs/launching.md,
// "When something goes wrong").
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "accelerate/common/job_state.h"
#include "accelerate/distributed/communication_traffic.h"

namespace accelerate {

// This process's JobState: `environment` (unset: the process's), `options`,
// and the CUDA devices and NCCL support of this LibTorch build.
JobState current_job_state(const JobOptions& options = {},
                           const std::optional<Environment>& environment = std::nullopt);

// Reductions offered to users (Accelerate's "sum" | "mean" | "max") plus min.
enum class ReduceOp { kSum, kMean, kMax, kMin };
const char* to_string(ReduceOp op);

// An all-reduce in flight; wait() blocks until it finished (or throws the same
// DistributedError a blocking call would).
class PendingCollective {
 public:
  struct State;
  PendingCollective() = default;
  explicit PendingCollective(std::shared_ptr<State> state);
  void wait();
  bool valid() const { return state_ != nullptr; }
  // A collective whose wait() waits for this one, then runs `after` (e.g.
  // widening or dequantizing what arrived); failures stay this one's.
  PendingCollective then(std::function<void()> after) &&;

 private:
  std::shared_ptr<State> state_;
};

// The bytes of Communicator::reduce_scatter_buffer's shared memory.
struct SharedBufferUsage {
  std::size_t reserved = 0;     // kept for the job's life, in use or for reuse
  std::size_t in_use = 0;       // by tensors alive now
  std::size_t peak_in_use = 0;  // the most in use at once since reset_shared_buffer_peak()
};

class Communicator {
 public:
  // Joins the job described by `job`: rank 0 hosts a TCPStore at
  // master_addr:master_port, everyone connects within job.timeout, then the
  // process groups are formed. A one-process job connects to nothing.
  // Throws DistributedError (unreachable master, port in use, peers missing).
  static std::shared_ptr<Communicator> connect(const JobState& job);

  // Joins through a c10d FileStore at `path` on a filesystem every rank sees
  // (Python's file:// init method); used by tests that run ranks as threads.
  // Gloo binds to `hostname` (127.0.0.1 for single-machine jobs).
  static std::shared_ptr<Communicator> connect_through_file(
      const std::string& path, const JobState& job, const std::string& hostname = "127.0.0.1");

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const JobState& job() const;
  int rank() const { return job().rank; }
  int world_size() const { return job().world_size; }
  bool debug() const { return job().debug; }

  // Whether sums of contiguous CPU tensors (float, double, half, int32,
  // int64) bypass Gloo through a shared memory segment: every rank runs on
  // this machine and JobOptions::shared_memory_all_reduce is on.
  bool sums_cpu_tensors_in_shared_memory() const;

  // In-place all-reduce. Handles what a backend lacks (Gloo: mean, bf16,
  // bool) by reducing a widened copy and writing the result back in the
  // tensor's own dtype. Mean of an integer tensor is an error.
  void all_reduce(at::Tensor& tensor, ReduceOp op);

  // Whether the backend serving tensors on `device` sums `dtype` itself
  // (Gloo: not bf16 or bool; all_reduce() widens those, the async one can't).
  bool reduces_natively(at::ScalarType dtype, c10::Device device) const;

  // Asynchronous in-place SUM all-reduce of a contiguous float tensor, for
  // overlapping gradient synchronisation with backward. `what` names it in
  // error messages (e.g. "gradient bucket 3").
  PendingCollective all_reduce_sum_async(at::Tensor& tensor, const std::string& what);

  // Sharded training's collectives on a flat buffer of world_size equal
  // shards (shard r is elements [r*n, (r+1)*n)). Both move (N-1)/N of the
  // buffer in and out of each rank once, half of what an all-reduce of the
  // buffer moves, on every backend: NCCL's own, and on CPU through shared
  // memory (one-machine jobs) or Gloo's all-to-all and all-gather, because
  // Gloo's reduce-scatter is missing (1.13) or an all-reduce in disguise
  // (2.x). Contiguous tensors of one dtype on one device; `shard` may be a
  // view into the buffer. docs/sharding.md has the measurements.
  //
  // shard (n elements) = shard rank() of every rank's `buffer`, summed in
  // rank order ((x0 + x1) + x2 ...; so it equals the same elements of an
  // all-reduce through shared memory bitwise). Any dtype but bool.
  void reduce_scatter_sum(const at::Tensor& buffer, at::Tensor& shard);
  PendingCollective reduce_scatter_sum_async(const at::Tensor& buffer, at::Tensor& shard,
                                             const std::string& what);
  // A new uninitialised flat buffer of `numel` elements for
  // reduce_scatter_sum's input. Through shared memory it lives in memory
  // the other processes map, so they read their shards where they are and
  // the reduce-scatter copies nothing (on one 2-core machine: about half the
  // time of one from a private buffer on 4 processes, 0.8-0.95x on 2); elsewhere
  // it is at::empty. Such buffers are pooled
  // for reuse: at most 8 and 256 MiB per process stay reserved for the
  // job's life; beyond that, private memory. No allocator statistics see
  // them: shared_buffer_usage() tells their bytes.
  at::Tensor reduce_scatter_buffer(std::int64_t numel, const at::TensorOptions& options);
  SharedBufferUsage shared_buffer_usage() const;
  void reset_shared_buffer_peak();  // peak_in_use = in_use
  // buffer's shard r = rank r's `shard`. Any dtype.
  void all_gather_into(const at::Tensor& shard, at::Tensor& buffer);
  PendingCollective all_gather_into_async(const at::Tensor& shard, at::Tensor& buffer,
                                          const std::string& what);

  // Low-precision forms (FSDP's param_dtype / reduce_dtype, DeepSpeed's
  // communication_data_type): the values travel as `wire` (a floating
  // dtype, e.g. bf16: half the bytes of fp32) and arrive in the tensors'
  // own dtype; `wire` equal to it is the plain form. Reduce-scatter: every
  // process's buffer is rounded to `wire` (its own rows too; through shared
  // memory `buffer` itself is rounded in place) and each shard is the sum of
  // the rounded values in rank order, accumulated in the shard's dtype: the
  // same bits through Gloo, shared memory and NCCL. All-gather: every shard
  // is rounded to `wire` and every process, its own row too, receives the
  // rounded values, so all hold the same bits.
  PendingCollective reduce_scatter_sum_async(const at::Tensor& buffer, at::Tensor& shard,
                                             const std::string& what, at::ScalarType wire);
  PendingCollective all_gather_into_async(const at::Tensor& shard, at::Tensor& buffer,
                                          const std::string& what, at::ScalarType wire);

  // Row r of `send` (world_size equal rows) to rank r; `receive`'s row r
  // from rank r (its own row copied). Contiguous tensors of one dtype and
  // size on one device. Through Gloo (also on one machine) or NCCL; for
  // collectives that transform what they send (ZeRO++'s quantized
  // reduce-scatter), so nothing is summed here.
  PendingCollective all_to_all_async(const at::Tensor& send, at::Tensor& receive,
                                     const std::string& what);

  // Every rank's bytes, in rank order. Lengths may differ between ranks.
  std::vector<std::string> all_gather_bytes(const std::string& bytes);

  // All-gather of tensors with identical shape and dtype on every rank,
  // returned in rank order. Any dtype (sent as raw bytes).
  std::vector<at::Tensor> all_gather_same_shape(const at::Tensor& tensor);

  // Overwrites `tensor` with process `from_process`'s. Shapes must match.
  void broadcast(at::Tensor& tensor, int from_process);

  // Blocks until every rank has called it (Accelerate's wait_for_everyone).
  void barrier();

  // ---- Process groups -------------------------------------------------------
  // A communicator for the processes `ranks` of this one (numbered as here,
  // each once, in any order): a member's rank() there is its position in
  // `ranks`, and every collective there involves the members alone, with
  // the same timeout and failure reports (naming processes by job_rank()).
  // Members that all share a machine sum CPU tensors through shared memory
  // even when the job spans machines; others use Gloo (NCCL for CUDA
  // tensors). Collective here: every process calls it, with the same list,
  // in the same order as its other new_group calls; a process that asks for
  // another list, or never asks, makes it fail with DistributedError naming
  // that process and both lists, never a hang past the timeout. Returns
  // null on the processes outside `ranks`. Error (on every process alike)
  // for an empty list, or a rank out of range or repeated. `purpose`
  // names the group in traffic() and in failure reports ("tp group #3
  // (ranks 0, 1)"; empty: "process group #3 (ranks 0, 1)").
  std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks,
                                          const std::string& purpose = "");
  // The groups of `partition` (each process in exactly one), made in its
  // order by new_group on every process (each named for `purpose`);
  // returns this process's group.
  std::shared_ptr<Communicator> split(const std::vector<std::vector<int>>& partition,
                                      const std::string& purpose = "");
  // The rank in the whole job of this communicator's process `rank`.
  int job_rank(int rank) const;

  // ---- Traffic --------------------------------------------------------------
  // What this process's collectives moved since the job connected (or the
  // last reset_traffic()), for the job and for every process group of it
  // this process belongs to, in the order they were made; read from any of
  // them. Counting costs a lock per collective, never a message.
  std::vector<GroupTraffic> traffic() const;
  void reset_traffic();  // every group's counters on this process, to zero

  // Opaque; defined in communicator.cpp.
  struct Impl;

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace accelerate
