// The protocol SharedMemoryCollectives' ranks follow, piece by piece
// (shared_memory_exchange.h).
#include "distributed/shared_memory_exchange.h"

#include <unistd.h>
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
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>
#include "common/settings.h"
#include "common/shared_memory_names.h"
#include "distributed/failure_diagnosis.h"
#include "distributed/rank_ordered_sum.h"
#include "distributed/shared_buffer_pool.h"
#include "distributed/shared_memory_segment.h"

namespace accelerate {
namespace detail {

const char* SharedMemoryCollectives::Impl::peer_input_segment(int r) {
  const RankControl& peer = controls[r];
  auto& mapped = peer_segments[{r, peer.input_segment}];
  if (!mapped) {
    const std::string name = SharedBufferPool::segment_name(
        shm::pool_prefix(peer.pid, peer.pool_key), peer.input_segment);
    std::string error;
    mapped = SharedMemorySegment::open(name, peer.input_segment_bytes, &error);
    if (!mapped) {
      throw std::runtime_error("cannot read rank " + std::to_string(r) + "'s buffer: " + error);
    }
  }
  return mapped->data();
}

void SharedMemoryCollectives::Impl::run_worker() {
  for (;;) {
    std::shared_ptr<SharedMemoryOperation> operation;
    {
      MutexLock lock(mutex);
      while (!stopping && queue.empty()) queue_changed.wait(mutex);
      if (queue.empty()) return;
      operation = std::move(queue.front());
      queue.pop_front();
    }
    if (broken.empty()) {
      try {
        run(*operation);
      } catch (const std::exception& failure) {
        broken = failure.what();
        announce_gone();
      }
    }
    operation->finish(broken);
  }
}

void SharedMemoryCollectives::Impl::announce_gone() {
  if (pool) pool->close();
  RankControl& mine = controls[rank];
  mine.gone.store(1, std::memory_order_release);
  for (Counter* word : {&mine.arrived, &mine.reduced, &mine.released}) futex_wake_all(*word);
}

void SharedMemoryCollectives::Impl::run(const SharedMemoryOperation& operation) {
  const at::Tensor& input = operation.input;
  const std::int64_t element = static_cast<std::int64_t>(input.element_size());
  const std::int64_t slot_elements = static_cast<std::int64_t>(slot_bytes) / element;
  const Clock::time_point deadline = Clock::now() + timeout;
  Piece piece{operation.kind, input.scalar_type(), 0, 0, 0, SharedBufferPool::Location()};
  // Elements per piece: of the tensor (sum), of each rank's shard
  // (all-gather), or of each of the world_size shards (reduce-scatter,
  // whose slot holds one run of every destination's shard).
  std::int64_t per_piece = slot_elements;
  switch (operation.kind) {
    case SharedMemoryKind::kSum:
      piece.total = input.numel();
      break;
    case SharedMemoryKind::kAllGather:
      piece.total = input.numel();
      break;
    case SharedMemoryKind::kReduceScatter:
      piece.total = operation.output.numel();
      per_piece = slot_elements / world_size;
      piece.pooled = pool->locate(input);
      break;
  }
  do {  // an empty tensor still takes one (empty) piece, so ranks stay in step
    piece.numel = std::min(per_piece, piece.total - piece.offset);
    run_piece(operation, piece, deadline);
    piece.offset += piece.numel;
  } while (piece.offset < piece.total);
}

void SharedMemoryCollectives::Impl::run_piece(const SharedMemoryOperation& operation,
                                              const Piece& piece, Clock::time_point deadline) {
  const std::string& what = operation.what;
  const std::uint32_t g = ++generation;
  const std::size_t element = c10::elementSize(piece.dtype);
  const std::size_t piece_bytes = static_cast<std::size_t>(piece.numel) * element;
  const auto at = [&](const at::Tensor& tensor, std::int64_t index) {
    return static_cast<char*>(tensor.data_ptr()) + static_cast<std::size_t>(index) * element;
  };
  RankControl& mine = controls[rank];
  // Peers may still be reading this slot's previous piece.
  wait_for_peers(&RankControl::released, g - 1, what, deadline);
  const SharedBufferPool::Location& pooled = piece.pooled;
  if (piece.kind == SharedMemoryKind::kReduceScatter) {
    // Slot: this piece's run of shard 0, then of shard 1, ... except this
    // rank's own shard, which only this rank reads (from its input). An
    // input in the pool is not copied: peers read it where it is.
    for (int d = 0; d < world_size && piece_bytes > 0 && pooled.segment < 0; ++d) {
      if (d == rank) continue;
      std::memcpy(slot(rank) + d * piece_bytes, at(operation.input, d * piece.total + piece.offset),
                  piece_bytes);
    }
  } else if (piece_bytes > 0) {
    std::memcpy(slot(rank), at(operation.input, piece.offset), piece_bytes);
  }
  mine.kind = static_cast<std::int32_t>(piece.kind);
  mine.numel = piece.numel;
  mine.total = piece.total;
  mine.offset = piece.offset;
  mine.dtype = static_cast<std::int32_t>(piece.dtype);
  mine.input_segment = pooled.segment;
  mine.input_segment_bytes = pooled.segment_bytes;
  mine.input_offset = pooled.offset;
  publish(mine.arrived, g);
  wait_for_peers(&RankControl::arrived, g, what, deadline);
  check_peers_match(piece, what);

  switch (piece.kind) {
    case SharedMemoryKind::kSum: {
      std::int64_t lo = 0, hi = 0;
      share_of(rank, piece.numel, element, &lo, &hi);
      // This rank's share, for its peers (in its slot) and for itself.
      std::vector<const char*> sources;
      for (int r = 0; r < world_size; ++r) sources.push_back(slot(r) + lo * element);
      sum_in_rank_order(piece.dtype, sources, hi - lo, slot(rank) + lo * element,
                        at(operation.input, piece.offset + lo));
      publish(mine.reduced, g);
      wait_for_peers(&RankControl::reduced, g, what, deadline);
      for (int r = 0; r < world_size; ++r) {
        if (r == rank) continue;
        share_of(r, piece.numel, element, &lo, &hi);
        if (hi > lo) {
          std::memcpy(at(operation.input, piece.offset + lo), slot(r) + lo * element,
                      static_cast<std::size_t>(hi - lo) * element);
        }
      }
      break;
    }
    case SharedMemoryKind::kReduceScatter: {
      const std::size_t mine_from = static_cast<std::size_t>(rank * piece.total + piece.offset);
      std::vector<const char*> sources;
      for (int r = 0; r < world_size; ++r) {
        if (r == rank) {
          sources.push_back(at(operation.input, static_cast<std::int64_t>(mine_from)));
        } else if (controls[r].input_segment >= 0) {
          sources.push_back(peer_input_segment(r) + controls[r].input_offset + mine_from * element);
        } else {
          sources.push_back(slot(r) + rank * piece_bytes);
        }
      }
      sum_in_rank_order(piece.dtype, sources, piece.numel, nullptr,
                        at(operation.output, piece.offset));
      // A peer that failed stopped waiting for this sum and may have
      // written into its buffer since: then the sum is not to be trusted.
      std::atomic_thread_fence(std::memory_order_seq_cst);
      for (int r = 0; r < world_size; ++r) {
        if (r != rank && controls[r].input_segment >= 0 &&
            controls[r].gone.load(std::memory_order_acquire) != 0) {
          throw std::runtime_error("rank " + std::to_string(r) +
                                   " failed while its buffer was read during " + what);
        }
      }
      publish(mine.reduced, g);
      if (pooled.segment >= 0 && piece.offset + piece.numel == piece.total) {
        // The caller may write into the input once wait() returns: not
        // before every peer has read its shard of it (and so mapped it).
        wait_for_peers(&RankControl::reduced, g, what, deadline);
        pool->remove_name(pooled.segment);
      }
      break;
    }
    case SharedMemoryKind::kAllGather:
      for (int r = 0; r < world_size && piece_bytes > 0; ++r) {
        std::memcpy(at(operation.output, r * piece.total + piece.offset), slot(r), piece_bytes);
      }
      publish(mine.reduced, g);
      break;
  }
  publish(mine.released, g);
}

void SharedMemoryCollectives::Impl::share_of(int r, std::int64_t numel, std::size_t element,
                                             std::int64_t* lo, std::int64_t* hi) const {
  const std::int64_t align = std::max<std::int64_t>(1, shm::kShareAlignment / element);
  std::int64_t each = (numel + world_size - 1) / world_size;
  each = (each + align - 1) / align * align;
  *lo = std::min(numel, r * each);
  *hi = std::min(numel, *lo + each);
}

void SharedMemoryCollectives::Impl::publish(Counter& counter, std::uint32_t g) {
  counter.store(g, std::memory_order_release);
  futex_wake_all(counter);
}

void SharedMemoryCollectives::Impl::wait_for_peers(Counter RankControl::*counter,
                                                   std::uint32_t target, const std::string& what,
                                                   Clock::time_point deadline) {
  for (int r = 0; r < world_size; ++r) {
    if (r == rank) continue;
    Counter& word = controls[r].*counter;
    for (;;) {
      const std::uint32_t seen = word.load(std::memory_order_acquire);
      if (static_cast<std::int32_t>(seen - target) >= 0) break;
      if (closing.load()) throw std::runtime_error("the communicator was closed during " + what);
      if (controls[r].gone.load(std::memory_order_acquire) != 0) {
        throw std::runtime_error("rank " + std::to_string(r) +
                                 " failed or closed its communicator before " + what);
      }
      const Clock::time_point now = Clock::now();
      if (now >= deadline) {
        throw std::runtime_error("rank " + std::to_string(r) + " did not reach " + what +
                                 " within " + format_seconds(timeout) +
                                 " (shared-memory collectives)");
      }
      if (!process_exists(controls[r].pid)) {
        throw std::runtime_error("rank " + std::to_string(r) + " (process " +
                                 std::to_string(controls[r].pid) + ") exited during " + what);
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      futex_wait(word, seen, std::min(shm::kWaitSlice, left + std::chrono::milliseconds(1)));
    }
  }
}

void SharedMemoryCollectives::Impl::check_peers_match(const Piece& piece,
                                                      const std::string& what) const {
  const auto describe = [](std::int32_t kind, std::int64_t total, std::int32_t dtype) {
    const char* verb = kind == static_cast<std::int32_t>(SharedMemoryKind::kSum) ? "sums"
                       : kind == static_cast<std::int32_t>(SharedMemoryKind::kReduceScatter)
                           ? "reduce-scatters shards of"
                           : "all-gathers shards of";
    return std::string(verb) + " " + std::to_string(total) + " elements of " +
           c10::toString(static_cast<at::ScalarType>(dtype));
  };
  for (int r = 0; r < world_size; ++r) {
    const RankControl& peer = controls[r];
    if (peer.kind == static_cast<std::int32_t>(piece.kind) && peer.total == piece.total &&
        peer.offset == piece.offset && peer.numel == piece.numel &&
        peer.dtype == static_cast<std::int32_t>(piece.dtype)) {
      continue;
    }
    throw std::runtime_error(what + ": rank " + std::to_string(r) + " " +
                             describe(peer.kind, peer.total, peer.dtype) + " where rank " +
                             std::to_string(rank) + " " +
                             describe(static_cast<std::int32_t>(piece.kind), piece.total,
                                      static_cast<std::int32_t>(piece.dtype)) +
                             " (do all ranks issue the same collectives in the same order?)");
  }
}

}  // namespace detail
}  // namespace accelerate
