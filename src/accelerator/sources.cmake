# Sources of the library's accelerator area.
target_sources(accelerate PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/accelerator.cpp
  ${CMAKE_CURRENT_LIST_DIR}/accelerator_checkpoint.cpp
  ${CMAKE_CURRENT_LIST_DIR}/engine_choice.cpp
  ${CMAKE_CURRENT_LIST_DIR}/state_items.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel_split.cpp
  ${CMAKE_CURRENT_LIST_DIR}/uncaught_errors.cpp
  ${CMAKE_CURRENT_LIST_DIR}/accelerator_delegates.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gradient_state.cpp
  ${CMAKE_CURRENT_LIST_DIR}/scheduler.cpp
  ${CMAKE_CURRENT_LIST_DIR}/random.cpp
  ${CMAKE_CURRENT_LIST_DIR}/memory.cpp)
