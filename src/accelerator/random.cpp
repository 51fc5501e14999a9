#include "accelerate/accelerator/random.h"

#include <ATen/Context.h>

namespace accelerate {

void set_seed(uint64_t seed, bool device_specific, int process_index) {
  if (device_specific) seed += static_cast<uint64_t>(process_index);
  // Seeds the CPU generator and, where GPUs are present, every CUDA one.
  at::manual_seed(seed);
}

}  // namespace accelerate
