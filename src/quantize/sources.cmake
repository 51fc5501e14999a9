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
