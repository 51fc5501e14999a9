// Memory housekeeping that exists only in CUDA builds of LibTorch.
#pragma once

namespace accelerate {
namespace compat {

// Returns cached CUDA blocks to the driver; nothing on CPU-only builds.
void empty_cuda_cache();

}  // namespace compat
}  // namespace accelerate
