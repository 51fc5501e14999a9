#include "distributed/shared_buffer_pool.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "distributed/shared_memory_segment.h"

namespace accelerate {
namespace detail {

struct SharedBufferPool::Entry {
  std::unique_ptr<SharedMemorySegment> segment;
  std::string name;  // empty once removed
  bool in_use = false;
};

SharedBufferPool::SharedBufferPool(std::string name_prefix) : prefix_(std::move(name_prefix)) {}

SharedBufferPool::~SharedBufferPool() {
  for (const auto& entry : entries_) forget_name(*entry);
}

void SharedBufferPool::forget_name(Entry& entry) {
  if (entry.name.empty()) return;
  SharedMemorySegment::remove_name(entry.name);
  entry.name.clear();
}

std::string SharedBufferPool::segment_name(const std::string& prefix, std::int32_t segment) {
  return prefix + std::to_string(segment);
}

at::Tensor SharedBufferPool::allocate(const std::shared_ptr<SharedBufferPool>& self,
                                      std::int64_t numel, const at::TensorOptions& options) {
  SharedBufferPool& pool = *self;
  const std::size_t bytes = static_cast<std::size_t>(numel) *
                            c10::elementSize(c10::typeMetaToScalarType(options.dtype()));
  if (bytes == 0) return at::Tensor();
  std::int32_t chosen = -1;
  void* data = nullptr;
  {
    MutexLock lock(pool.mutex_);
    // The smallest free segment that fits; one over twice the size only when
    // no new segment may be made (a small bucket should not hold a large one).
    std::int32_t fitting = -1;
    for (std::size_t i = 0; i < pool.entries_.size(); ++i) {
      const Entry& entry = *pool.entries_[i];
      if (entry.in_use || entry.segment->size() < bytes) continue;
      if (fitting < 0 || entry.segment->size() < pool.entries_[fitting]->segment->size()) {
        fitting = static_cast<std::int32_t>(i);
      }
    }
    const std::size_t rounded = round_up_to_pages(bytes);
    const bool may_create = !pool.creation_stopped_ && pool.entries_.size() < kMaxSegments &&
                            pool.usage_.reserved + rounded <= kMaxBytes;
    if (fitting >= 0 && (pool.entries_[fitting]->segment->size() <= 2 * rounded || !may_create)) {
      chosen = fitting;
    } else if (may_create) {
      const auto number = static_cast<std::int32_t>(pool.entries_.size());
      auto entry = std::make_unique<Entry>();
      entry->name = segment_name(pool.prefix_, number);
      std::string error;
      entry->segment = SharedMemorySegment::create(entry->name, rounded, &error);
      if (!entry->segment) {
        // /dev/shm is full: private memory will do, now and from now on
        // (reserving pages up to the limit each step would cost a copy).
        pool.creation_stopped_ = true;
        return at::Tensor();
      }
      pool.usage_.reserved += rounded;
      pool.entries_.push_back(std::move(entry));
      chosen = number;
    } else {
      return at::Tensor();
    }
    Entry& entry = *pool.entries_[chosen];
    entry.in_use = true;
    data = entry.segment->data();
    pool.usage_.in_use += entry.segment->size();
    pool.usage_.peak_in_use = std::max(pool.usage_.peak_in_use, pool.usage_.in_use);
  }
  return at::from_blob(
      data, {numel}, [self, chosen](void*) { self->give_back(chosen); }, options.device(at::kCPU));
}

void SharedBufferPool::give_back(std::int32_t segment) {
  MutexLock lock(mutex_);
  Entry& entry = *entries_[static_cast<std::size_t>(segment)];
  entry.in_use = false;
  usage_.in_use -= entry.segment->size();
}

SharedBufferPool::Location SharedBufferPool::locate(const at::Tensor& tensor) const {
  Location where;
  if (!tensor.defined() || tensor.nbytes() == 0) return where;
  const char* first = static_cast<const char*>(tensor.data_ptr());
  MutexLock lock(mutex_);
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const SharedMemorySegment& segment = *entries_[i]->segment;
    if (first < segment.data() || first + tensor.nbytes() > segment.data() + segment.size()) {
      continue;
    }
    where.segment = static_cast<std::int32_t>(i);
    where.segment_bytes = segment.size();
    where.offset = static_cast<std::uint64_t>(first - segment.data());
    break;
  }
  return where;
}

void SharedBufferPool::remove_name(std::int32_t segment) {
  MutexLock lock(mutex_);
  forget_name(*entries_[static_cast<std::size_t>(segment)]);
}

void SharedBufferPool::close() {
  MutexLock lock(mutex_);
  creation_stopped_ = true;
  for (const auto& entry : entries_) forget_name(*entry);
}

SharedBufferUsage SharedBufferPool::usage() const {
  MutexLock lock(mutex_);
  return usage_;
}

void SharedBufferPool::reset_peak() {
  MutexLock lock(mutex_);
  usage_.peak_in_use = usage_.in_use;
}

}  // namespace detail
}  // namespace accelerate
