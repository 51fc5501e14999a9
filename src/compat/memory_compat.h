// Memory housekeeping that exists only in CUDA builds of LibTorch, and a
// CPU allocation counter for the memory benchmarks (c10::Allocator's
// interface differs between LibTorch generations).
#pragma once

#include <cstdint>

namespace accelerate {
namespace compat {

// Returns cached CUDA blocks to the driver; nothing on CPU-only builds.
void empty_cuda_cache();

// Counts CPU tensor memory: installs, once per process, a wrapper above
// LibTorch's CPU allocator (whose own keeps no statistics) that adds each
// block's bytes to a live count and lowers it when the block is freed.
// Install it before the tensors to count exist (blocks allocated earlier
// are not counted when freed). For benchmarks: it stays for the process.
void install_cpu_allocation_counter();
std::int64_t cpu_live_bytes();
// The most live bytes since the last reset_cpu_peak_bytes() (which sets it
// to the live count).
std::int64_t cpu_peak_bytes();
void reset_cpu_peak_bytes();

}  // namespace compat
}  // namespace accelerate
