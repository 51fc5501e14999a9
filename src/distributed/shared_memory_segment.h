// The operating-system pieces behind SharedMemoryCollectives: a named POSIX
// shared memory segment whose pages are reserved up front, a test for "these
// processes share one machine", and futex waits on words inside the segment.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace accelerate {
namespace detail {

// Segments are sized in whole pages: the kernel maps no less.
constexpr std::size_t kSharedMemoryPageBytes = 4096;
constexpr std::size_t round_up_to_pages(std::size_t bytes) {
  return (bytes + kSharedMemoryPageBytes - 1) / kSharedMemoryPageBytes * kSharedMemoryPageBytes;
}

class SharedMemorySegment {
 public:
  // Creates `name` (a "/name" for shm_open, readable by this user only) of
  // `bytes` zeroed bytes. Every page is reserved now, so a full /dev/shm is
  // an error here (returned as null with *error set) rather than a SIGBUS
  // in the middle of training.
  static std::unique_ptr<SharedMemorySegment> create(const std::string& name, std::size_t bytes,
                                                     std::string* error);
  // Maps an existing segment; null with *error set when it cannot.
  static std::unique_ptr<SharedMemorySegment> open(const std::string& name, std::size_t bytes,
                                                   std::string* error);
  // Removes the name; mappings stay valid until unmapped.
  static void remove_name(const std::string& name);

  ~SharedMemorySegment();
  SharedMemorySegment(const SharedMemorySegment&) = delete;
  SharedMemorySegment& operator=(const SharedMemorySegment&) = delete;

  char* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  SharedMemorySegment(char* data, std::size_t size) : data_(data), size_(size) {}
  char* data_;
  std::size_t size_;
};

// Identifies this machine and the namespaces that decide whether two
// processes can share a segment and see each other's process ids: host name,
// boot id, and the IPC, mount and PID namespaces. Empty when any part cannot
// be read (then nothing is shared).
std::string shared_memory_identity();

// Whether process `pid` still runs (a zombie does not).
bool process_exists(int pid);

// Futexes on 32-bit words that may live in memory shared between processes.
static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t) &&
                  std::atomic<std::uint32_t>::is_always_lock_free,
              "futex words must be plain lock-free 32-bit atomics");
// Sleeps until `word` no longer holds `seen`, a wake, or `at_most` passed.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen,
                std::chrono::milliseconds at_most);
void futex_wake_all(std::atomic<std::uint32_t>& word);

}  // namespace detail
}  // namespace accelerate
