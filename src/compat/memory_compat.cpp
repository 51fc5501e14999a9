#include "compat/memory_compat.h"

#include <atomic>
#include <cstddef>
#include <unordered_map>
#include <utility>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include "accelerate_compat_config.h"
#include "common/mutex.h"
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
      BlockTable& table = block_table();
      detail::MutexLock lock(table.mutex);
      table.blocks.emplace(data, Block{std::move(inner), bytes});
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
  struct BlockTable {
    detail::Mutex mutex;
    std::unordered_map<void*, Block> blocks GUARDED_BY(mutex);
  };
  static BlockTable& block_table() {
    // Never destroyed: it outlives every tensor, and frees during exit use it too.
    static auto* table = new BlockTable();
    return *table;
  }
  static void release(void* data) {
    c10::DataPtr inner;  // freed after the lock is dropped
    {
      BlockTable& table = block_table();
      detail::MutexLock lock(table.mutex);
      auto it = table.blocks.find(data);
      if (it == table.blocks.end()) return;
      live_bytes.fetch_sub(static_cast<std::int64_t>(it->second.bytes));
      inner = std::move(it->second.inner);
      table.blocks.erase(it);
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
