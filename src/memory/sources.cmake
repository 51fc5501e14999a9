# Sources of the library's memory area (target_sources on 'accelerate'):
# trading compute for memory, starting with activation checkpointing
# (docs/activation-checkpointing.md).
target_sources(accelerate PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/activation_checkpointing.cpp
  ${CMAKE_CURRENT_LIST_DIR}/empty_weights.cpp)
