#include "compat/memory_compat.h"

#include <atomic>
#include <cstddef>
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

struct CountedBlock {
  c10::DataPtr inner;
  std::size_t bytes;
};

#if ACCELERATE_COMPAT_ALLOCATOR_CONST_ALLOCATE
#define ACCELERATE_ALLOCATE_CONST const
#else
#define ACCELERATE_ALLOCATE_CONST
#endif

// Each block carries its size to the deleter, which gives the inner block
// back; so frees are counted whichever thread makes them.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(std::size_t bytes) ACCELERATE_ALLOCATE_CONST override {
    c10::DataPtr inner = inner_->allocate(bytes);
    if (bytes == 0 || inner.get() == nullptr) return inner;
    void* data = inner.get();
    const c10::Device device = inner.device();
    auto* block = new CountedBlock{std::move(inner), bytes};
    const std::int64_t live = live_bytes.fetch_add(static_cast<std::int64_t>(bytes)) +
                              static_cast<std::int64_t>(bytes);
    std::int64_t peak = peak_bytes.load();
    while (live > peak && !peak_bytes.compare_exchange_weak(peak, live)) {
    }
    return {data, block, &CountingAllocator::release, device};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
#if ACCELERATE_COMPAT_ALLOCATOR_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif

 private:
  static void release(void* context) {
    auto* block = static_cast<CountedBlock*>(context);
    live_bytes.fetch_sub(static_cast<std::int64_t>(block->bytes));
    delete block;  // frees the memory through the inner DataPtr
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
