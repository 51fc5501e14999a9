# Sources of the library's distributed area (target_sources on 'accelerate'):
# the Communicator over c10d, the device mesh that forms its groups,
# collectives, failure diagnosis and the shared-memory collectives. Job
# state, which needs no LibTorch, is in src/common/.
target_sources(accelerate PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/communicator.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device_mesh.cpp
  ${CMAKE_CURRENT_LIST_DIR}/failure_diagnosis.cpp
  ${CMAKE_CURRENT_LIST_DIR}/flat_collectives.cpp
  ${CMAKE_CURRENT_LIST_DIR}/network.cpp
  ${CMAKE_CURRENT_LIST_DIR}/collectives.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shape_exchange.cpp
  ${CMAKE_CURRENT_LIST_DIR}/object_serializer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/process_control.cpp
  ${CMAKE_CURRENT_LIST_DIR}/process_groups.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rank_ordered_sum.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shared_buffer_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shared_memory_collectives.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shared_memory_exchange.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shared_memory_segment.cpp
  ${CMAKE_CURRENT_LIST_DIR}/traffic_ledger.cpp)
# The shared-memory sums are the inner loop of every same-machine reduction:
# -O3 vectorizes them (the build type's -O2 leaves them scalar). Each element
# still adds its sources in rank order, so results are unchanged.
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/rank_ordered_sum.cpp
  PROPERTIES COMPILE_OPTIONS "-O3")
# The mesh's arithmetic needs no LibTorch: the launcher judges layouts too.
target_sources(accelerate_common PRIVATE ${CMAKE_CURRENT_LIST_DIR}/mesh_layout.cpp)
