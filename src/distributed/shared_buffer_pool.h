// Flat buffers that live in shared memory, so that the peers of a one-machine
// job read them where they are. A reduce-scatter whose input lies in one
// skips the copy of (N-1)/N of the buffer into the collectives' segment, the
// larger part of its cost (the sum that remains reads each element once).
//
// Each buffer is a segment of its own, created by its owner alone: a peer
// maps it by name the first time a collective names it, and the owner
// removes the name once every peer has read from it (or when the pool goes),
// so that nothing is left in /dev/shm. Segments are kept for reuse when their
// tensors die, up to kMaxSegments of at most kMaxBytes together per process:
// a training step asks for the same bucket sizes every time, so after the
// first step nothing is created. Beyond those limits, or when /dev/shm is
// full, allocate() returns an undefined tensor and the caller uses private
// memory (the collective then copies, as before).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "accelerate/distributed/communicator.h"
#include "common/mutex.h"

namespace accelerate {
namespace detail {

class SharedMemorySegment;

class SharedBufferPool {
 public:
  static constexpr std::size_t kMaxSegments = 8;
  static constexpr std::size_t kMaxBytes = std::size_t{256} << 20;

  // Where a tensor's bytes lie in this pool's segments.
  struct Location {
    std::int32_t segment = -1;  // -1: not in the pool
    std::uint64_t segment_bytes = 0;
    std::uint64_t offset = 0;  // of the tensor's first byte in the segment
  };

  // `name_prefix` + segment number names each segment ("/accelerate-...-").
  explicit SharedBufferPool(std::string name_prefix);
  ~SharedBufferPool();
  SharedBufferPool(const SharedBufferPool&) = delete;
  SharedBufferPool& operator=(const SharedBufferPool&) = delete;

  // An uninitialised contiguous tensor of `numel` elements in a free
  // segment, or undefined (see above). `self` keeps the pool alive while
  // the tensor lives.
  static at::Tensor allocate(const std::shared_ptr<SharedBufferPool>& self, std::int64_t numel,
                             const at::TensorOptions& options);
  Location locate(const at::Tensor& tensor) const;
  // Every peer has mapped `segment`: its name can go.
  void remove_name(std::int32_t segment);
  // The collectives failed or closed: every name goes, and no segment is
  // made any more.
  void close();
  SharedBufferUsage usage() const;
  void reset_peak();

  static std::string segment_name(const std::string& prefix, std::int32_t segment);

 private:
  struct Entry;
  void give_back(std::int32_t segment);
  static void forget_name(Entry& entry);  // removes it from /dev/shm, once

  const std::string prefix_;
  mutable Mutex mutex_;
  std::vector<std::unique_ptr<Entry>> entries_ GUARDED_BY(mutex_);  // index = segment number
  SharedBufferUsage usage_ GUARDED_BY(mutex_);
  bool creation_stopped_ GUARDED_BY(mutex_) = false;  // /dev/shm was full, or close()
};

}  // namespace detail
}  // namespace accelerate
