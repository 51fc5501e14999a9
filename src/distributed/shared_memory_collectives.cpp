#include "distributed/shared_memory_collectives.h"
#include "distributed/shared_memory_exchange.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <new>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include <unistd.h>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "common/settings.h"
#include "common/shared_memory_names.h"
#include "distributed/failure_diagnosis.h"
#include "distributed/rank_ordered_sum.h"
#include "distributed/shared_buffer_pool.h"
#include "distributed/shared_memory_segment.h"

namespace accelerate {
namespace detail {

void SharedMemoryOperation::wait() {
  MutexLock lock(mutex_);
  while (!done_) done_changed_.wait(mutex_);
  if (!error_.empty()) throw std::runtime_error(error_);
}

void SharedMemoryOperation::finish(const std::string& error) {
  input = at::Tensor();
  output = at::Tensor();
  {
    MutexLock lock(mutex_);
    done_ = true;
    error_ = error;
  }
  done_changed_.notify_all();
}

namespace {

// The segment's layout: every rank's control block, then every rank's slot.
// This rank's block gets its process id and the key to its pool's names.
void attach(SharedMemoryCollectives::Impl& impl, std::unique_ptr<SharedMemorySegment> segment) {
  impl.segment = std::move(segment);
  impl.controls = reinterpret_cast<shm::RankControl*>(impl.segment->data());
  impl.slots = impl.segment->data() + shm::controls_bytes_for(impl.world_size);
  shm::RankControl& mine = impl.controls[impl.rank];
  mine.pid = ::getpid();
  mine.pool_key = shm::random_key();
  impl.pool = std::make_shared<SharedBufferPool>(shm::pool_prefix(mine.pid, mine.pool_key));
}

// Rank 0's side of set-up: checks that everyone shares this machine and
// creates the segment. Returns its name, or "" with *why_not set.
std::string create_segment(c10d::Store& store, SharedMemoryCollectives::Impl& impl,
                           const std::string& identity, std::size_t bytes, std::string* why_not) {
  if (identity.empty()) {
    *why_not = "this machine's identity cannot be read from /proc";
    return "";
  }
  for (int r = 1; r < impl.world_size; ++r) {
    const std::string theirs = get_text(store, "shm/identity/" + std::to_string(r));
    if (theirs == identity) continue;
    *why_not = "rank " + std::to_string(r) +
               (theirs.rfind('!', 0) == 0 ? ": " + theirs.substr(1)
                                          : " runs on another machine or in another namespace");
    return "";
  }
  const std::string name = shared_memory_prefix(::getpid()) + shm::hex(shm::random_key());
  auto segment = SharedMemorySegment::create(name, bytes, why_not);
  if (!segment) return "";
  for (int r = 0; r < impl.world_size; ++r) {
    new (segment->data() + sizeof(shm::RankControl) * static_cast<std::size_t>(r))
        shm::RankControl();
  }
  // (attach() below sets rank 0's own block.)
  attach(impl, std::move(segment));
  return name;
}

}  // namespace

std::unique_ptr<SharedMemoryCollectives> SharedMemoryCollectives::create(
    c10d::Store& store, int rank, int world_size, std::chrono::milliseconds timeout, bool wanted,
    std::string* why_not) {
  if (world_size < 2) {
    *why_not = "a one-process job has nothing to sum";
    return nullptr;
  }
  auto impl = std::make_unique<Impl>();
  impl->rank = rank;
  impl->world_size = world_size;
  impl->timeout = timeout;
  impl->slot_bytes = shm::slot_bytes_for(world_size);
  const std::size_t bytes =
      shm::controls_bytes_for(world_size) + impl->slot_bytes * static_cast<std::size_t>(world_size);
  const std::string refused = "!";  // prefixes a reason in the store's answers
  const std::string turned_off =
      std::string("turned off (") + settings::kSharedMemoryAllReduce.variable() + "=0)";
  const std::string identity = wanted ? shared_memory_identity() : refused + turned_off;

  std::string verdict;
  if (rank == 0) {
    std::string reason = wanted ? "" : turned_off + " on rank 0";
    const std::string name =
        reason.empty() ? create_segment(store, *impl, identity, bytes, &reason) : "";
    // Every peer has mapped the segment (or failed to) once it answered;
    // then the name goes, and a crash later leaves nothing in /dev/shm.
    struct RemoveName {
      const std::string& name;
      ~RemoveName() {
        if (!name.empty()) SharedMemorySegment::remove_name(name);
      }
    } remove_name{name};
    set_text(store, "shm/segment", name.empty() ? refused + reason : name);
    if (!name.empty()) {
      for (int r = 1; r < world_size && reason.empty(); ++r) {
        const std::string answer = get_text(store, "shm/opened/" + std::to_string(r));
        if (answer != "ok") reason = "rank " + std::to_string(r) + ": " + answer.substr(1);
      }
    }
    verdict = reason.empty() ? "ok" : refused + reason;
    set_text(store, "shm/verdict", verdict);
  } else {
    set_text(store, "shm/identity/" + std::to_string(rank), identity);
    const std::string answer = get_text(store, "shm/segment");
    if (answer.rfind(refused, 0) == 0) {
      verdict = answer;
    } else {
      std::string reason;
      auto segment = SharedMemorySegment::open(answer, bytes, &reason);
      if (segment) attach(*impl, std::move(segment));
      set_text(store, "shm/opened/" + std::to_string(rank),
               impl->segment ? std::string("ok") : refused + reason);
      verdict = get_text(store, "shm/verdict");
    }
  }
  if (verdict != "ok") {
    *why_not = verdict.substr(refused.size());
    return nullptr;
  }
  Impl* raw = impl.get();
  impl->worker = std::thread([raw] { raw->run_worker(); });
  return std::unique_ptr<SharedMemoryCollectives>(new SharedMemoryCollectives(std::move(impl)));
}

SharedMemoryCollectives::SharedMemoryCollectives(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

SharedMemoryCollectives::~SharedMemoryCollectives() {
  // A peer still waiting for this rank would wait in vain: tell it now.
  impl_->announce_gone();
  {
    MutexLock lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->closing = true;
  impl_->queue_changed.notify_all();
  impl_->worker.join();
}

bool SharedMemoryCollectives::moves(const at::Tensor& tensor) {
  return tensor.defined() && tensor.device().is_cpu() && tensor.layout() == at::kStrided &&
         tensor.is_contiguous();
}

bool SharedMemoryCollectives::serves(const at::Tensor& tensor) {
  return moves(tensor) && serves_dtype(tensor.scalar_type());
}

bool SharedMemoryCollectives::serves_dtype(at::ScalarType dtype) {
  return sums_in_rank_order(dtype);
}

std::shared_ptr<SharedMemoryOperation> SharedMemoryCollectives::enqueue(
    std::shared_ptr<SharedMemoryOperation> operation) {
  {
    MutexLock lock(impl_->mutex);
    impl_->queue.push_back(operation);
  }
  impl_->queue_changed.notify_one();
  return operation;
}

at::Tensor SharedMemoryCollectives::shared_buffer(std::int64_t numel,
                                                  const at::TensorOptions& options) {
  return SharedBufferPool::allocate(impl_->pool, numel, options);
}

SharedBufferPool& SharedMemoryCollectives::buffer_pool() { return *impl_->pool; }

std::shared_ptr<SharedMemoryOperation> SharedMemoryCollectives::sum_async(const at::Tensor& tensor,
                                                                          const std::string& what) {
  return enqueue(
      std::make_shared<SharedMemoryOperation>(SharedMemoryKind::kSum, tensor, tensor, what));
}

std::shared_ptr<SharedMemoryOperation> SharedMemoryCollectives::reduce_scatter_async(
    const at::Tensor& input, const at::Tensor& shard, const std::string& what) {
  return enqueue(std::make_shared<SharedMemoryOperation>(SharedMemoryKind::kReduceScatter, input,
                                                         shard, what));
}

std::shared_ptr<SharedMemoryOperation> SharedMemoryCollectives::all_gather_async(
    const at::Tensor& shard, const at::Tensor& output, const std::string& what) {
  return enqueue(
      std::make_shared<SharedMemoryOperation>(SharedMemoryKind::kAllGather, shard, output, what));
}

}  // namespace detail
}  // namespace accelerate
