# Feature probes of the LibTorch that find_package(Torch) found. Every LibTorch
# difference the code cares about is decided here, by compiling a snippet
# against the real headers, never by comparing version numbers. The results
# land in accelerate_compat_config.h, read only by src/compat/.
include(CheckCXXSourceCompiles)

set(_torch_defs "")
foreach(_t torch_cpu torch_cuda torch)
  if(TARGET ${_t})
    get_target_property(_d ${_t} INTERFACE_COMPILE_DEFINITIONS)
    if(_d)
      list(APPEND _torch_defs ${_d})
    endif()
  endif()
endforeach()
list(REMOVE_DUPLICATES _torch_defs)
set(CMAKE_REQUIRED_INCLUDES ${TORCH_INCLUDE_DIRS})
set(CMAKE_REQUIRED_FLAGS "${TORCH_CXX_FLAGS} -std=c++17")
set(CMAKE_REQUIRED_DEFINITIONS "")
foreach(_d ${_torch_defs})
  list(APPEND CMAKE_REQUIRED_DEFINITIONS "-D${_d}")
endforeach()
set(CMAKE_REQUIRED_QUIET ON)
# Compile-only probes (no link) unless a probe asks for libraries below.
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)

# Sanity: the probe set-up itself must compile c10d code, or every probe
# below would silently report "absent".
check_cxx_source_compiles([[
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
int main() { return 0; }
]] ACCELERATE_COMPAT_PROBES_WORK)
if(NOT ACCELERATE_COMPAT_PROBES_WORK)
  message(FATAL_ERROR "accelerate: cannot compile against LibTorch's c10d/Gloo headers "
                      "(is libgloo-dev installed?); see CMakeFiles/CMakeError.log")
endif()

# 2.0+: concrete process groups derive from c10d::Backend, not c10d::ProcessGroup.
check_cxx_source_compiles([[
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <type_traits>
static_assert(std::is_base_of<c10d::Backend, c10d::ProcessGroupGloo>::value, "");
int main() { return 0; }
]] ACCELERATE_COMPAT_BACKEND_BASE)

# 2.x: TCPStoreOptions::useLibUV exists (and defaults to true even where
# LibTorch was built without libuv, e.g. Debian's 2.6).
check_cxx_source_compiles([[
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
int main() { c10d::TCPStoreOptions o; o.useLibUV = false; return 0; }
]] ACCELERATE_COMPAT_TCPSTORE_USE_LIBUV)

# 2.4+: device-generic autocast state (is/set_autocast_enabled(device), ...);
# 1.13 has per-device functions (set_cpu_enabled, set_autocast_cpu_dtype),
# deprecated in 2.4.
check_cxx_source_compiles([[
#include <ATen/autocast_mode.h>
int main() {
  at::autocast::set_autocast_enabled(at::kCPU, at::autocast::is_autocast_enabled(at::kCPU));
  at::autocast::set_autocast_dtype(at::kCPU, at::autocast::get_autocast_dtype(at::kCPU));
  return 0;
}
]] ACCELERATE_COMPAT_DEVICE_AUTOCAST)

# 2.1+: Optimizer::state() is keyed by the parameter's TensorImpl pointer
# (void*); 1.13 keys it by that pointer printed as a string.
check_cxx_source_compiles([[
#include <torch/optim/optimizer.h>
#include <type_traits>
using State = std::remove_reference_t<decltype(std::declval<torch::optim::Optimizer&>().state())>;
static_assert(std::is_same<State::key_type, void*>::value, "");
int main() { return 0; }
]] ACCELERATE_COMPAT_OPTIM_STATE_POINTER_KEY)

# 2.0+: fused attention (at::scaled_dot_product_attention); 1.13 has none.
check_cxx_source_compiles([[
#include <ATen/ATen.h>
int main() {
  at::Tensor q;
  auto out = at::scaled_dot_product_attention(q, q, q, c10::nullopt, 0.0, /*is_causal=*/true);
  return out.defined() ? 0 : 1;
}
]] ACCELERATE_COMPAT_HAS_SDPA)

# c10::Allocator::allocate: const in 1.x, not in 2.x (the memory benches'
# counting allocator overrides it).
check_cxx_source_compiles([[
#include <c10/core/Allocator.h>
struct Probe : c10::Allocator {
  c10::DataPtr allocate(size_t) const override { return {}; }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
};
int main() { return 0; }
]] ACCELERATE_COMPAT_ALLOCATOR_CONST_ALLOCATE)

# c10::Allocator::copy_data, pure virtual since 2.3.
check_cxx_source_compiles([[
#include <c10/core/Allocator.h>
int main() {
  void (c10::Allocator::*copy)(void*, const void*, std::size_t) const = &c10::Allocator::copy_data;
  return copy != nullptr ? 0 : 1;
}
]] ACCELERATE_COMPAT_ALLOCATOR_COPY_DATA)

# NCCL process group compiled into this LibTorch (CUDA builds only). Linked,
# not just compiled, because some CPU builds ship the header without NCCL.
set(CMAKE_TRY_COMPILE_TARGET_TYPE EXECUTABLE)
set(CMAKE_REQUIRED_LIBRARIES ${TORCH_LIBRARIES})
check_cxx_source_compiles([[
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
int main() { auto o = c10d::ProcessGroupNCCL::Options::create(); return o ? 0 : 1; }
]] ACCELERATE_COMPAT_HAS_NCCL)

# CUDA's caching allocator (c10_cuda), to release cached blocks after an
# out-of-memory error. Linked, like the NCCL probe.
check_cxx_source_compiles([[
#include <c10/cuda/CUDACachingAllocator.h>
int main() { c10::cuda::CUDACachingAllocator::emptyCache(); return 0; }
]] ACCELERATE_COMPAT_HAS_CUDA_ALLOCATOR)
unset(CMAKE_REQUIRED_LIBRARIES)

foreach(_probe ACCELERATE_COMPAT_BACKEND_BASE ACCELERATE_COMPAT_TCPSTORE_USE_LIBUV
               ACCELERATE_COMPAT_DEVICE_AUTOCAST ACCELERATE_COMPAT_OPTIM_STATE_POINTER_KEY
               ACCELERATE_COMPAT_HAS_NCCL ACCELERATE_COMPAT_HAS_CUDA_ALLOCATOR
               ACCELERATE_COMPAT_HAS_SDPA ACCELERATE_COMPAT_ALLOCATOR_CONST_ALLOCATE
               ACCELERATE_COMPAT_ALLOCATOR_COPY_DATA)
  if(${_probe})
    set(${_probe} 1)
  else()
    set(${_probe} 0)
  endif()
  message(STATUS "accelerate compat probe ${_probe} = ${${_probe}}")
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/accelerate_compat_config.h.in
               ${CMAKE_CURRENT_BINARY_DIR}/generated/accelerate_compat_config.h @ONLY)
