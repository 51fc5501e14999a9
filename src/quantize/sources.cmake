# Sources of the library's quantize area (target_sources on 'accelerate'):
# block-wise int8 / int4 quantization for ZeRO++'s quantized communication
# (docs/sharding.md, "Quantized communication (ZeRO++ qwZ/qgZ): kernels").
target_sources(accelerate PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/block_quantize.cpp
  ${CMAKE_CURRENT_LIST_DIR}/block_quantize_kernels.cpp)
# The inner loops: -O3 so GCC vectorizes them (the build type's -O2 leaves
# them scalar in GCC 12), and no floating-point contraction so the bytes are
# the same whether or not the compiler targets FMA. A source with its own
# options stays out of the unity batches; it includes only c10's small
# headers, so it skips the library's precompiled header too.
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/block_quantize_kernels.cpp PROPERTIES
    COMPILE_OPTIONS "-O3;-ffp-contract=off"
    SKIP_PRECOMPILE_HEADERS ON
    SKIP_UNITY_BUILD_INCLUSION ON)
endif()

# at::parallel_for forks only in code compiled with OpenMP when LibTorch's
# parallel backend is OpenMP (parallel_blocks.cpp says why): that one
# source gets the flag, and the library links the runtime LibTorch already
# loads (libgomp.so.1, one copy by its soname). Without OpenMP the blocks
# are quantized on one thread.
find_package(OpenMP COMPONENTS CXX)
target_sources(accelerate PRIVATE ${CMAKE_CURRENT_LIST_DIR}/parallel_blocks.cpp)
if(OpenMP_CXX_FOUND)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/parallel_blocks.cpp PROPERTIES
    COMPILE_OPTIONS "${OpenMP_CXX_FLAGS}"
    SKIP_PRECOMPILE_HEADERS ON
    SKIP_UNITY_BUILD_INCLUSION ON)
  # The library only, not OpenMP::OpenMP_CXX: its -fopenmp would reach every
  # source of the library.
  target_link_libraries(accelerate PRIVATE ${OpenMP_CXX_LIBRARIES})
endif()
