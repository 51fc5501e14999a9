# Sources of the library's nn area (target_sources on 'accelerate'): building
# blocks for models, starting with causal attention (include/accelerate/attention.h).
target_sources(accelerate PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/attention.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sequence_parallel.cpp)
