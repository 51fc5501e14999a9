# Sources of the library's parallel area (target_sources on 'accelerate'):
# the bucketed, overlapped gradient reducer (docs/gradient-sync.md).
target_sources(accelerate PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/autograd_reach.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bucket_assignment.cpp
  ${CMAKE_CURRENT_LIST_DIR}/data_parallel_engine.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gradient_norm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gradient_reducer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/parallel_engine.cpp
  ${CMAKE_CURRENT_LIST_DIR}/reducer_state.cpp
  ${CMAKE_CURRENT_LIST_DIR}/state_broadcast.cpp)
