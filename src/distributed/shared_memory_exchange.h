// SharedMemoryCollectives' inside (shared_memory_collectives.h): the
// layout of the shared segment (each rank's control words, then its slot)
// and the worker that runs each operation in pieces through the slots.
// shared_memory_collectives.cpp sets a segment up and queues operations;
// shared_memory_exchange.cpp is the protocol the ranks follow piece by
// piece. Internal to those two files.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "common/mutex.h"
#include "common/shared_memory_names.h"
#include "distributed/shared_buffer_pool.h"
#include "distributed/shared_memory_collectives.h"
#include "distributed/shared_memory_segment.h"

namespace accelerate {
namespace detail {
namespace shm {

using Clock = std::chrono::steady_clock;
using Counter = std::atomic<std::uint32_t>;

// How often a waiting rank looks at the clock and at its peers' processes.
constexpr std::chrono::milliseconds kWaitSlice{100};
// Slots: 8 MiB each for 2..4 ranks (a typical bucket in one piece), at most
// 32 MiB together beyond that, never under 1 MiB.
constexpr std::size_t kMaxSlotBytes = std::size_t{8} << 20;
constexpr std::size_t kMinSlotBytes = std::size_t{1} << 20;
constexpr std::size_t kAllSlotsBytes = std::size_t{32} << 20;
// A share starts on a 64-byte boundary for every element size, so no two
// ranks write into one cache line.
constexpr std::int64_t kShareAlignment = 64;

// Each rank's progress through the current piece (generation g): it has
// copied its input into its slot (arrived = g), summed its share into its
// slot (reduced = g), and copied everyone's shares out (released = g), after
// which its peers may overwrite their slots with the next piece. `gone` is
// set, and all three words woken, when the rank will never advance again (it
// failed, or its communicator closed), so that peers fail at once instead of
// waiting out the timeout. Peers only read the fields below `gone` after an
// acquire of `arrived`.
struct alignas(64) RankControl {
  Counter arrived{0};
  Counter reduced{0};
  Counter released{0};
  Counter gone{0};
  std::int32_t pid = 0;
  std::int32_t kind = 0;    // SharedMemoryKind of the piece announced by `arrived`
  std::int32_t dtype = 0;   // of that piece
  std::int64_t numel = 0;   // elements in that piece
  std::int64_t total = 0;   // elements in its whole tensor (reduce-scatter: shard)
  std::int64_t offset = 0;  // where the piece starts in it
  // A reduce-scatter's input in this rank's SharedBufferPool (segment -1:
  // it was copied into the slot instead); the offset is of its first byte.
  std::int32_t input_segment = -1;
  std::uint64_t input_segment_bytes = 0;
  std::uint64_t input_offset = 0;
  std::uint64_t pool_key = 0;  // names this rank's pool segments, with its pid
};

inline std::size_t slot_bytes_for(int world_size) {
  const std::size_t even = kAllSlotsBytes / static_cast<std::size_t>(world_size) /
                           kSharedMemoryPageBytes * kSharedMemoryPageBytes;
  return std::min(kMaxSlotBytes, std::max(kMinSlotBytes, even));
}

inline std::size_t controls_bytes_for(int world_size) {
  return round_up_to_pages(sizeof(RankControl) * static_cast<std::size_t>(world_size));
}

inline std::uint64_t random_key() {
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

inline std::string hex(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
  return text;
}

// The names of rank `pid`'s pool segments start with this.
inline std::string pool_prefix(std::int32_t pid, std::uint64_t key) {
  return shared_memory_prefix(pid) + hex(key) + "-b";
}

}  // namespace shm

struct SharedMemoryCollectives::Impl {
  using Clock = shm::Clock;
  using Counter = shm::Counter;
  using RankControl = shm::RankControl;

  std::unique_ptr<SharedMemorySegment> segment;
  int rank = 0;
  int world_size = 0;
  std::chrono::milliseconds timeout{};
  std::size_t slot_bytes = 0;
  RankControl* controls = nullptr;
  char* slots = nullptr;
  std::shared_ptr<SharedBufferPool> pool;
  // Peers' pool segments this rank has read from, by (rank, segment).
  std::map<std::pair<int, std::int32_t>, std::unique_ptr<SharedMemorySegment>> peer_segments;

  // Worker-thread state.
  std::uint32_t generation = 0;
  std::string broken;  // the first failure: the segment's state is unknown after it

  Mutex mutex;
  CondVar queue_changed;
  std::deque<std::shared_ptr<SharedMemoryOperation>> queue GUARDED_BY(mutex);
  bool stopping GUARDED_BY(mutex) = false;
  std::atomic<bool> closing{false};
  std::thread worker;

  char* slot(int r) const { return slots + static_cast<std::size_t>(r) * slot_bytes; }

  // Rank r's pool segment named in its announcement, mapped once.
  const char* peer_input_segment(int r);

  void run_worker() EXCLUDES(mutex);

  // Also ends this rank's pool: its names go (no peer will map them now) and
  // no segment is made any more.
  void announce_gone();

  void run(const SharedMemoryOperation& operation);

  struct Piece {
    SharedMemoryKind kind;
    at::ScalarType dtype;
    std::int64_t total;   // elements in the whole tensor (reduce-scatter: in a shard)
    std::int64_t offset;  // of the piece in it
    std::int64_t numel;   // in the piece
    // A reduce-scatter's input in this rank's pool: peers read it there.
    SharedBufferPool::Location pooled;
  };

  void run_piece(const SharedMemoryOperation& operation, const Piece& piece,
                 Clock::time_point deadline);

  void share_of(int r, std::int64_t numel, std::size_t element, std::int64_t* lo,
                std::int64_t* hi) const;

  static void publish(Counter& counter, std::uint32_t g);

  void wait_for_peers(Counter RankControl::*counter, std::uint32_t target, const std::string& what,
                      Clock::time_point deadline);

  // Whole tensors are compared, not just pieces: a tensor of P+5 elements
  // against tensors of P and 5 must be an error, not a mixed-up sum.
  void check_peers_match(const Piece& piece, const std::string& what) const;
};

}  // namespace detail
}  // namespace accelerate
