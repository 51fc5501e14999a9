# Sources of the library's nn area (target_sources on 'accelerate'): building
# blocks for models: attention (include/accelerate/nn/attention.h), activations
# (activations.h), the cross-entropy loss (cross_entropy.h), the RMS norm
# (rms_norm.h), rotary embeddings (rotary_embedding.h), sequence parallelism, tensor parallelism
# (tensor_parallel.h), the layers it splits (parallel_layers.h) and plans naming them
# (tensor_parallel_plan.h).
target_sources(accelerate PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/activations.cpp
  ${CMAKE_CURRENT_LIST_DIR}/attention.cpp
  ${CMAKE_CURRENT_LIST_DIR}/blocked_causal_attention.cpp
  ${CMAKE_CURRENT_LIST_DIR}/causal_softmax.cpp
  ${CMAKE_CURRENT_LIST_DIR}/causal_softmax_kernels.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cross_entropy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cross_entropy_kernels.cpp
  ${CMAKE_CURRENT_LIST_DIR}/float_causal_attention.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gelu_kernels.cpp
  ${CMAKE_CURRENT_LIST_DIR}/parallel_layers.cpp
  ${CMAKE_CURRENT_LIST_DIR}/split_linear.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rms_norm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rms_norm_kernels.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rotary_embedding.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rotary_kernels.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sequence_parallel.cpp
  ${CMAKE_CURRENT_LIST_DIR}/silu_kernels.cpp
  ${CMAKE_CURRENT_LIST_DIR}/small_gemm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/vocab_parallel_cross_entropy.cpp)
# The kernels' loops are written for the compiler to vectorize, which GCC
# does for them only at -O3 (its -O2 cost model refuses loops with a
# remainder); kept out of unity batches so the flag stays on these files
# alone, and out of the precompiled header: GCC gives a source that includes
# one the optimization level the header was built with (-O2), whatever the
# source's own flags say (small_gemm.cpp's register tile was left rolled up,
# its 16 accumulators in memory). The kernels include no LibTorch header.
# -fno-trapping-math: the loops' selects (exp's underflow, NaN passing
# through) compute both sides; with FP traps assumed possible GCC keeps them
# as branches wherever it has no masked vector ops, and the AVX2 and
# baseline copies of GELU, SiLU and cross-entropy ran scalar (nothing here
# reads the FP exception flags, and the values are the same IEEE ones).
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/gelu_kernels.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cross_entropy_kernels.cpp
  ${CMAKE_CURRENT_LIST_DIR}/causal_softmax_kernels.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rms_norm_kernels.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rotary_kernels.cpp
  ${CMAKE_CURRENT_LIST_DIR}/silu_kernels.cpp
  ${CMAKE_CURRENT_LIST_DIR}/small_gemm.cpp PROPERTIES
  SKIP_UNITY_BUILD_INCLUSION ON SKIP_PRECOMPILE_HEADERS ON
  COMPILE_OPTIONS "$<$<OR:$<CXX_COMPILER_ID:GNU>,$<CXX_COMPILER_ID:Clang>>:-O3;-fno-trapping-math>")
