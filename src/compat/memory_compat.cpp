#include "compat/memory_compat.h"

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

}  // namespace compat
}  // namespace accelerate
