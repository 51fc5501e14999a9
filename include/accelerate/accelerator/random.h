// Seeding, as Accelerate's set_seed.
#pragma once

#include <cstdint>

namespace accelerate {

class Communicator;

// Seeds LibTorch's default CPU generator and every CUDA generator with
// `seed`, plus `process_index` when device_specific (so each process draws
// different dropout masks, yet the run is reproducible).
void set_seed(uint64_t seed, bool device_specific = false, int process_index = 0);

}  // namespace accelerate
