#include "accelerate/data/data_transfer.h"

#include <ATen/Context.h>

namespace accelerate {

// Pinning needs CUDA's host allocator; without a GPU, LibTorch throws.
bool can_pin_memory() { return at::hasCUDA(); }

}  // namespace accelerate
