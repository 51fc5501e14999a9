#include "accelerate/random.h"

#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>

namespace accelerate {

void set_seed(uint64_t seed, bool device_specific, int process_index) {
  if (device_specific) seed += static_cast<uint64_t>(process_index);
  at::manual_seed(seed);  // the CPU generator
  auto& cuda = at::detail::getCUDAHooks();
  for (int64_t device = 0; device < cuda.getNumGPUs(); ++device) {
    auto generator = cuda.getDefaultCUDAGenerator(device);
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_current_seed(seed);
  }
}

}  // namespace accelerate
