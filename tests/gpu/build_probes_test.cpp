// The compat probes (cmake/TorchCompatProbes.cmake) against what the LibTorch
// in use says about itself. Always runs, GPU or not: a probe that silently
// failed (say, nccl.h not found) turns the CUDA branches off without a word,
// and every GPU test below would then skip instead of testing.
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/cuda.h>

#include <gtest/gtest.h>

#include "accelerate_compat_config.h"
#include "gpu/gpu_test_support.h"

namespace gpu_build_probes_test {

// LibTorch's CMake target defines USE_C10D_NCCL for everything that links a
// build with NCCL (torch_cuda's interface definitions); the probe must agree.
TEST(BuildProbes, NcclProbeAgreesWithLibTorchsTarget) {
#ifdef USE_C10D_NCCL
  EXPECT_EQ(ACCELERATE_COMPAT_HAS_NCCL, 1)
      << "this LibTorch has NCCL (USE_C10D_NCCL) but the NCCL probe failed: is nccl.h found?";
#else
  EXPECT_EQ(ACCELERATE_COMPAT_HAS_NCCL, 0) << "NCCL probed in a LibTorch without USE_C10D_NCCL";
#endif
  EXPECT_EQ(accelerate::compat::kHasNccl, ACCELERATE_COMPAT_HAS_NCCL == 1);
}

// libtorch_cuda registers its CUDA hooks when it loads (without a GPU too):
// exactly then the CUDA caching allocator must have been found.
TEST(BuildProbes, CudaAllocatorProbeAgreesWithTheLoadedLibTorch) {
  const bool cuda_compiled_in = at::CUDAHooksRegistry()->Has("CUDAHooks");
  EXPECT_EQ(ACCELERATE_COMPAT_HAS_CUDA_ALLOCATOR, cuda_compiled_in ? 1 : 0)
      << "CUDA hooks registered: " << cuda_compiled_in;
  if (torch::cuda::is_available()) {
    EXPECT_TRUE(cuda_compiled_in) << "a CUDA device is visible through an unregistered CUDA";
    EXPECT_EQ(ACCELERATE_COMPAT_HAS_NCCL, 1) << "CUDA without NCCL: the GPU tests would skip";
  }
}

}  // namespace gpu_build_probes_test
