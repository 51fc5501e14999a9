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
# The language standard LibTorch asks of its users: C++17 up to 2.x releases
# of 2025, C++20 since (its headers refuse C++17, and its CMake target carries
# cxx_std_20, which raises every target that links it to C++20).
set(ACCELERATE_TORCH_CXX_STANDARD 17)
if(TARGET torch)
  get_target_property(_features torch INTERFACE_COMPILE_FEATURES)
  if(_features AND "cxx_std_20" IN_LIST _features)
    set(ACCELERATE_TORCH_CXX_STANDARD 20)
  endif()
endif()
message(STATUS "accelerate: LibTorch needs C++${ACCELERATE_TORCH_CXX_STANDARD}")
set(CMAKE_REQUIRED_INCLUDES ${TORCH_INCLUDE_DIRS})
# A CUDA build's headers include the toolkit's (cuda_runtime.h, ...), which
# its targets carry but TORCH_INCLUDE_DIRS does not name.
if(CUDAToolkit_INCLUDE_DIRS)
  list(APPEND CMAKE_REQUIRED_INCLUDES ${CUDAToolkit_INCLUDE_DIRS})
endif()
# ProcessGroupNCCL.hpp includes nccl.h, which no LibTorch ships: PyPI's wheel
# has it in its nvidia-nccl dependency (site-packages/nvidia/nccl/include),
# a CUDA toolkit install in its include folder. NCCL_INCLUDE_DIR (cache or
# environment) names another place. src/compat is the only user.
find_path(ACCELERATE_NCCL_INCLUDE_DIR nccl.h
  HINTS ${NCCL_INCLUDE_DIR} ENV NCCL_INCLUDE_DIR
        ${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include ${CUDAToolkit_INCLUDE_DIRS})
if(ACCELERATE_NCCL_INCLUDE_DIR)
  list(APPEND CMAKE_REQUIRED_INCLUDES ${ACCELERATE_NCCL_INCLUDE_DIR})
endif()
set(CMAKE_REQUIRED_FLAGS "${TORCH_CXX_FLAGS}")
# try_compile takes the language standard from CMAKE_CXX_STANDARD (CMP0067).
set(_accelerate_saved_cxx_standard ${CMAKE_CXX_STANDARD})
set(CMAKE_CXX_STANDARD ${ACCELERATE_TORCH_CXX_STANDARD})
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

# 2.x: a process group can be shut down explicitly (Backend::shutdown, what
# Python's destroy_process_group calls). ProcessGroupNCCL warns at exit when
# it was not, and NCCL's communicators are then torn down only by the
# destructor's fallback.
check_cxx_source_compiles([[
#include <torch/csrc/distributed/c10d/Backend.hpp>
int main() {
  c10d::Backend* backend = nullptr;
  if (backend) backend->shutdown();
  return 0;
}
]] ACCELERATE_COMPAT_BACKEND_SHUTDOWN)

# 2.x (since 2.6 or so): c10d::Store::clone() is pure virtual, so every
# store of ours must implement it (src/compat/tcp_store_client.cpp).
check_cxx_source_compiles([[
#include <torch/csrc/distributed/c10d/Store.hpp>
int main() {
  c10::intrusive_ptr<c10d::Store> (c10d::Store::*clone)() = &c10d::Store::clone;
  return clone != nullptr ? 0 : 1;
}
]] ACCELERATE_COMPAT_STORE_CLONE)

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
# The probes link LibTorch's library files by path: its CMake targets cannot
# be used inside try_compile (2.x wheels alias protobuf::libprotobuf to a
# dummy target, and aliases do not carry into the probe's project).
set(CMAKE_TRY_COMPILE_TARGET_TYPE EXECUTABLE)
set(CMAKE_REQUIRED_LIBRARIES "")
foreach(_lib torch torch_cpu torch_cuda torch_hip c10 c10_cuda c10_hip)
  find_library(ACCELERATE_PROBE_LIB_${_lib} NAMES ${_lib}
               HINTS ${TORCH_INSTALL_PREFIX}/lib NO_CACHE)
  if(ACCELERATE_PROBE_LIB_${_lib})
    list(APPEND CMAKE_REQUIRED_LIBRARIES ${ACCELERATE_PROBE_LIB_${_lib}})
  endif()
endforeach()
list(APPEND CMAKE_REQUIRED_LIBRARIES -Wl,--unresolved-symbols=ignore-in-shared-libs)
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
set(CMAKE_CXX_STANDARD ${_accelerate_saved_cxx_standard})

foreach(_probe ACCELERATE_COMPAT_BACKEND_BASE ACCELERATE_COMPAT_TCPSTORE_USE_LIBUV
               ACCELERATE_COMPAT_DEVICE_AUTOCAST ACCELERATE_COMPAT_OPTIM_STATE_POINTER_KEY
               ACCELERATE_COMPAT_HAS_NCCL ACCELERATE_COMPAT_HAS_CUDA_ALLOCATOR
               ACCELERATE_COMPAT_HAS_SDPA ACCELERATE_COMPAT_ALLOCATOR_CONST_ALLOCATE
               ACCELERATE_COMPAT_ALLOCATOR_COPY_DATA ACCELERATE_COMPAT_BACKEND_SHUTDOWN
               ACCELERATE_COMPAT_STORE_CLONE)
  if(${_probe})
    set(${_probe} 1)
  else()
    set(${_probe} 0)
  endif()
  message(STATUS "accelerate compat probe ${_probe} = ${${_probe}}")
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/accelerate_compat_config.h.in
               ${CMAKE_CURRENT_BINARY_DIR}/generated/accelerate_compat_config.h @ONLY)
