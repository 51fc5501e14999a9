#include "compat/memory_compat.h"

#include <atomic>
#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <utility>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include "accelerate_compat_config.h"
#if ACCELERATE_COMPAT_HAS_CUDA_ALLOCATOR
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace accelerate {
namespace compat {

void empty_cuda_cache() {
#if ACCELERATE_COMPAT_HAS_CUDA_ALLOCATOR
  c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

namespace {

std::atomic<std::int64_t> live_bytes{0};
std::atomic<std::int64_t> peak_bytes{0};

#if ACCELERATE_COMPAT_ALLOCATOR_CONST_ALLOCATE
#define ACCELERATE_ALLOCATE_CONST const
#else
#define ACCELERATE_ALLOCATE_CONST
#endif

// Each block's inner allocation and size, by its address: the DataPtr's
// context must be the address itself (LibTorch's raw_allocate, used inside
// some kernels, insists on it and frees through raw_deleter()), so the size
// cannot ride in the context. Frees are counted whichever thread makes them.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(std::size_t bytes) ACCELERATE_ALLOCATE_CONST override {
    c10::DataPtr inner = inner_->allocate(bytes);
    if (bytes == 0 || inner.get() == nullptr) return inner;
    void* data = inner.get();
    const c10::Device device = inner.device();
    {
      std::lock_guard<std::mutex> lock(blocks_mutex());
      blocks().emplace(data, Block{std::move(inner), bytes});
    }
    const std::int64_t live =
        live_bytes.fetch_add(static_cast<std::int64_t>(bytes)) + static_cast<std::int64_t>(bytes);
    std::int64_t peak = peak_bytes.load();
    while (live > peak && !peak_bytes.compare_exchange_weak(peak, live)) {
    }
    return {data, data, &CountingAllocator::release, device};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &CountingAllocator::release; }
#if ACCELERATE_COMPAT_ALLOCATOR_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif

 private:
  struct Block {
    c10::DataPtr inner;
    std::size_t bytes;
  };
  static std::mutex& blocks_mutex() {
    static auto* mutex = new std::mutex();  // used by frees during exit too
    return *mutex;
  }
  static std::unordered_map<void*, Block>& blocks() {
    static auto* map = new std::unordered_map<void*, Block>();  // outlives every tensor
    return *map;
  }
  static void release(void* data) {
    c10::DataPtr inner;  // freed after the lock is dropped
    {
      std::lock_guard<std::mutex> lock(blocks_mutex());
      auto it = blocks().find(data);
      if (it == blocks().end()) return;
      live_bytes.fetch_sub(static_cast<std::int64_t>(it->second.bytes));
      inner = std::move(it->second.inner);
      blocks().erase(it);
    }
  }
  c10::Allocator* inner_;
};

#undef ACCELERATE_ALLOCATE_CONST

}  // namespace

void install_cpu_allocation_counter() {
  static CountingAllocator* counter = nullptr;  // lives as long as the tensors
  if (counter != nullptr) return;
  counter = new CountingAllocator(c10::GetCPUAllocator());
  // Priority above the default's (0), so GetCPUAllocator() returns it.
  c10::SetCPUAllocator(counter, /*priority=*/1);
}

std::int64_t cpu_live_bytes() { return live_bytes.load(); }
std::int64_t cpu_peak_bytes() { return peak_bytes.load(); }
void reset_cpu_peak_bytes() { peak_bytes.store(live_bytes.load()); }

}  // namespace compat
}  // namespace accelerate
