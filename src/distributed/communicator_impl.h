// Communicator's insides, shared by the files that implement it
// (communicator.cpp: set-up, all-reduce, gathers, broadcast;
// flat_collectives.cpp: reduce-scatter and all-gather of flat buffers).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "accelerate/common/errors.h"
#include "accelerate/distributed/communicator.h"
#include "common/mutex.h"
#include "compat/c10d_compat.h"
#include "distributed/failure_diagnosis.h"
#include "distributed/shared_memory_collectives.h"
#include "distributed/traffic_ledger.h"

namespace accelerate {

struct PendingCollective::State {
  // A c10d backend's work (one or several pieces), or a shared-memory collective.
  std::vector<c10::intrusive_ptr<compat::Work>> works;
  std::shared_ptr<detail::SharedMemoryOperation> shared_memory;
  std::function<void()> then;  // after the transfer: e.g. a reduce-scatter's local sum
  std::function<void(const std::exception&)> on_failure;  // throws
};

namespace detail {

// Receive buffers of Gloo reduce-scatters, kept for the next one: a fresh
// buffer above glibc's mmap threshold (32 MiB even when tuned) is new pages
// every time, and faulting them in cost as much as the transfer (a 128 MB
// reduce-scatter on 2 ranks: 1.0x an all-reduce instead of ~0.6x). Shared
// with pending collectives, which may outlive the communicator.
class StagingPool {
 public:
  // A contiguous tensor of `numel` elements of `options`, maybe reused.
  at::Tensor take(int64_t numel, const at::TensorOptions& options) {
    const int64_t bytes = numel * static_cast<int64_t>(options.dtype().itemsize());
    MutexLock lock(mutex_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->numel() < bytes) continue;
      at::Tensor storage = std::move(*it);
      free_.erase(it);
      return storage.narrow(0, 0, bytes).view(options.dtype().toScalarType());
    }
    return at::empty({bytes}, at::kByte).view(options.dtype().toScalarType());
  }
  void give_back(const at::Tensor& tensor) {
    at::Tensor storage = at::empty({0}, at::kByte).set_(tensor.storage());
    MutexLock lock(mutex_);
    if (free_.size() < kKept) free_.push_back(storage.view({-1}));
  }

 private:
  static constexpr std::size_t kKept = 4;  // as many as collectives usually in flight
  Mutex mutex_;
  std::vector<at::Tensor> free_ GUARDED_BY(mutex_);  // whole byte storages
};

}  // namespace detail

struct Communicator::Impl {
  JobState job;
  c10::intrusive_ptr<c10d::Store> store;  // null in a one-process job
  c10::intrusive_ptr<compat::Backend> gloo;
  c10::intrusive_ptr<compat::Backend> nccl;  // only for CUDA jobs with NCCL
  // Sums of CPU tensors when every rank shares this machine; else null.
  std::unique_ptr<detail::SharedMemoryCollectives> shared_memory;
  // Shared with pending collectives, which may outlive the communicator.
  std::shared_ptr<detail::FailureDiagnosis> diagnosis;
  std::shared_ptr<detail::StagingPool> staging = std::make_shared<detail::StagingPool>();
  std::uint64_t sequence = 0;
  // A process group's members as the job numbers them (group rank r is
  // members[r]); empty for the whole job.
  std::vector<int> members;
  std::string gloo_hostname;         // what Gloo binds to, for this communicator's groups
  std::uint64_t groups_created = 0;  // process groups made from this communicator
  // Every communicator of the job on this process (shared with the groups
  // made from this one), and this one's own counters in it.
  std::shared_ptr<detail::TrafficLedger> ledger;
  std::shared_ptr<detail::GroupCounters> traffic;

  // Shuts NCCL down explicitly (compat::shutdown), as Python's
  // destroy_process_group would.
  ~Impl();

  bool single() const { return job.world_size == 1; }

  bool sums_in_shared_memory(const at::Tensor& tensor) const {
    return shared_memory && detail::SharedMemoryCollectives::serves(tensor);
  }

  // Whether `tensor` must be staged through host memory: a CUDA tensor in a
  // job without NCCL.
  bool stages_on_host(const at::Tensor& tensor) const {
    return !single() && tensor.is_cuda() && !nccl;
  }

  // The process group that moves `tensor`, and whether it must be staged
  // through host memory (a CUDA tensor without NCCL).
  compat::Backend& backend_for(const at::Tensor& tensor, bool* stage_on_host) {
    *stage_on_host = tensor.is_cuda() && !nccl;
    return (tensor.is_cuda() && nccl) ? *nccl : *gloo;
  }

  Transport transport_of(const compat::Backend& backend) const {
    return &backend == gloo.get() ? Transport::kGloo : Transport::kNccl;
  }

  // A ring all-reduce (Gloo's algorithm; NCCL's for most sizes): a
  // reduce-scatter then an all-gather, each passing (N-1)/N of the tensor
  // to the next rank. Shared memory moves as much between processes.
  void count_all_reduce(Transport transport, const at::Tensor& tensor) {
    const auto n = static_cast<std::uint64_t>(job.world_size);
    traffic->count_ring(TrafficKind::kAllReduce, transport, 2 * (n - 1) * tensor.nbytes() / n);
  }

  // Runs one collective; any failure becomes a DistributedError that says
  // what each peer was doing.
  template <class Op>
  void run(const std::string& what, Op&& op) {
    const std::uint64_t number = ++sequence;
    try {
      op();
    } catch (const DistributedError&) {
      throw;
    } catch (const std::exception& cause) {
      throw DistributedError(
          diagnosis->explain_collective(number, what, detail::first_line_of(cause)));
    }
  }

  // Starts one asynchronous collective: `start` sets the state's work or
  // shared-memory operation (and what to do after it). A failure, now or in
  // wait(), becomes a DistributedError as in run().
  template <class Start>
  PendingCollective start_async(const std::string& what, Start&& start) {
    const std::uint64_t number = ++sequence;
    auto state = std::make_shared<PendingCollective::State>();
    state->on_failure = [diagnosis = diagnosis, number, what](const std::exception& cause) {
      throw DistributedError(
          diagnosis->explain_collective(number, what, detail::first_line_of(cause)));
    };
    try {
      start(*state);
    } catch (const std::exception& cause) {
      state->on_failure(cause);
    }
    return PendingCollective(std::move(state));
  }

  // Gloo's pairwise transfers for the flat-buffer collectives: for each
  // peer, `to_and_from(peer)` gives the 1-D run this rank sends it and the
  // run it receives from it (`count` elements each). Sent in pieces of
  // kGlooPieceBytes, all posted at once, so that Gloo's threads pipeline them
  // as its own all-reduce does (one large message moved at about half the
  // rate; docs/sharding.md). Contiguous runs go straight from and to the
  // tensors: no staging copies. Tags number the pieces; a peer's messages
  // with one tag arrive in the order they were posted, so collectives in
  // flight together do not mix.
  template <class ToAndFrom>
  void exchange_pieces(PendingCollective::State& state, int64_t count, int64_t element_size,
                       ToAndFrom&& to_and_from) {
    constexpr int64_t kGlooPieceBytes = int64_t{2} << 20;
    const int64_t per_piece = std::max<int64_t>(1, kGlooPieceBytes / element_size);
    const int world = job.world_size;
    for (int step = 1; step < world; ++step) {
      // Step k: send to rank + k, receive from rank - k (every link busy).
      const int to = (job.rank + step) % world, from = (job.rank - step + world) % world;
      const at::Tensor send_run = to_and_from(to).first;
      const at::Tensor receive_run = to_and_from(from).second;
      int tag = 0;
      for (int64_t offset = 0; offset < count; offset += per_piece, ++tag) {
        const int64_t n = std::min(per_piece, count - offset);
        std::vector<at::Tensor> incoming{receive_run.narrow(0, offset, n).view(at::kByte)};
        std::vector<at::Tensor> outgoing{send_run.narrow(0, offset, n).view(at::kByte)};
        state.works.push_back(gloo->recv(incoming, from, tag));
        state.works.push_back(gloo->send(outgoing, to, tag));
      }
    }
  }
};

namespace detail {

// Forms the process groups (Gloo; shared memory when every member shares
// this machine; NCCL for CUDA jobs) of `job` over `store`, a store section
// of its own. `members`, `nodes` and `label`: for a process group, the
// job's rank and the machine of each member and the group's name in
// messages (FailureDiagnosis); empty for the whole job (whose machines are
// then exchanged when it spans several). Its traffic is counted in
// `ledger` (null: a new one, the job's). Throws DistributedError naming
// the ranks missing.
std::unique_ptr<Communicator::Impl> form_groups(JobState job, c10::intrusive_ptr<c10d::Store> store,
                                                const std::string& gloo_hostname,
                                                std::vector<int> members, std::vector<int> nodes,
                                                std::string label,
                                                std::shared_ptr<TrafficLedger> ledger);

// A communicator of one process (a one-process job, or a group of one).
std::unique_ptr<Communicator::Impl> form_single(JobState job, std::vector<int> members,
                                                std::string label,
                                                std::shared_ptr<TrafficLedger> ledger);

}  // namespace detail

}  // namespace accelerate
