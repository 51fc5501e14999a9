#include "distributed/shared_memory_collectives.h"

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
namespace {

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

std::size_t slot_bytes_for(int world_size) {
  const std::size_t even = kAllSlotsBytes / static_cast<std::size_t>(world_size) / kSharedMemoryPageBytes * kSharedMemoryPageBytes;
  return std::min(kMaxSlotBytes, std::max(kMinSlotBytes, even));
}

std::size_t controls_bytes_for(int world_size) {
  return round_up_to_pages(sizeof(RankControl) * static_cast<std::size_t>(world_size));
}

std::uint64_t random_key() {
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

std::string hex(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
  return text;
}

// The names of rank `pid`'s pool segments start with this.
std::string pool_prefix(std::int32_t pid, std::uint64_t key) {
  return shared_memory_prefix(pid) + hex(key) + "-b";
}

}  // namespace

void SharedMemoryOperation::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_changed_.wait(lock, [&] { return done_; });
  if (!error_.empty()) throw std::runtime_error(error_);
}

void SharedMemoryOperation::finish(const std::string& error) {
  input = at::Tensor();
  output = at::Tensor();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    error_ = error;
  }
  done_changed_.notify_all();
}

struct SharedMemoryCollectives::Impl {
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

  std::mutex mutex;
  std::condition_variable queue_changed;
  std::deque<std::shared_ptr<SharedMemoryOperation>> queue;
  bool stopping = false;
  std::atomic<bool> closing{false};
  std::thread worker;

  char* slot(int r) const { return slots + static_cast<std::size_t>(r) * slot_bytes; }

  // Rank r's pool segment named in its announcement, mapped once.
  const char* peer_input_segment(int r) {
    const RankControl& peer = controls[r];
    auto& mapped = peer_segments[{r, peer.input_segment}];
    if (!mapped) {
      const std::string name =
          SharedBufferPool::segment_name(pool_prefix(peer.pid, peer.pool_key), peer.input_segment);
      std::string error;
      mapped = SharedMemorySegment::open(name, peer.input_segment_bytes, &error);
      if (!mapped) {
        throw std::runtime_error("cannot read rank " + std::to_string(r) + "'s buffer: " + error);
      }
    }
    return mapped->data();
  }

  void run_worker() {
    for (;;) {
      std::shared_ptr<SharedMemoryOperation> operation;
      {
        std::unique_lock<std::mutex> lock(mutex);
        queue_changed.wait(lock, [&] { return stopping || !queue.empty(); });
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

  // Also ends this rank's pool: its names go (no peer will map them now) and
  // no segment is made any more.
  void announce_gone() {
    if (pool) pool->close();
    RankControl& mine = controls[rank];
    mine.gone.store(1, std::memory_order_release);
    for (Counter* word : {&mine.arrived, &mine.reduced, &mine.released}) futex_wake_all(*word);
  }

  void run(const SharedMemoryOperation& operation) {
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
                 Clock::time_point deadline) {
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
        std::memcpy(slot(rank) + d * piece_bytes,
                    at(operation.input, d * piece.total + piece.offset), piece_bytes);
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
            sources.push_back(peer_input_segment(r) + controls[r].input_offset +
                              mine_from * element);
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

  void share_of(int r, std::int64_t numel, std::size_t element, std::int64_t* lo,
                std::int64_t* hi) const {
    const std::int64_t align = std::max<std::int64_t>(1, kShareAlignment / element);
    std::int64_t each = (numel + world_size - 1) / world_size;
    each = (each + align - 1) / align * align;
    *lo = std::min(numel, r * each);
    *hi = std::min(numel, *lo + each);
  }

  static void publish(Counter& counter, std::uint32_t g) {
    counter.store(g, std::memory_order_release);
    futex_wake_all(counter);
  }

  void wait_for_peers(Counter RankControl::*counter, std::uint32_t target, const std::string& what,
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
        futex_wait(word, seen, std::min(kWaitSlice, left + std::chrono::milliseconds(1)));
      }
    }
  }

  // Whole tensors are compared, not just pieces: a tensor of P+5 elements
  // against tensors of P and 5 must be an error, not a mixed-up sum.
  void check_peers_match(const Piece& piece, const std::string& what) const {
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
};

namespace {

// The segment's layout: every rank's control block, then every rank's slot.
// This rank's block gets its process id and the key to its pool's names.
void attach(SharedMemoryCollectives::Impl& impl, std::unique_ptr<SharedMemorySegment> segment) {
  impl.segment = std::move(segment);
  impl.controls = reinterpret_cast<RankControl*>(impl.segment->data());
  impl.slots = impl.segment->data() + controls_bytes_for(impl.world_size);
  RankControl& mine = impl.controls[impl.rank];
  mine.pid = ::getpid();
  mine.pool_key = random_key();
  impl.pool = std::make_shared<SharedBufferPool>(pool_prefix(mine.pid, mine.pool_key));
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
  const std::string name = shared_memory_prefix(::getpid()) + hex(random_key());
  auto segment = SharedMemorySegment::create(name, bytes, why_not);
  if (!segment) return "";
  for (int r = 0; r < impl.world_size; ++r) {
    new (segment->data() + sizeof(RankControl) * static_cast<std::size_t>(r)) RankControl();
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
  impl->slot_bytes = slot_bytes_for(world_size);
  const std::size_t bytes =
      controls_bytes_for(world_size) + impl->slot_bytes * static_cast<std::size_t>(world_size);
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
    std::lock_guard<std::mutex> lock(impl_->mutex);
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
    std::lock_guard<std::mutex> lock(impl_->mutex);
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
