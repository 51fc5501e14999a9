# Sources of the library's data area (target_sources on 'accelerate').
target_sources(accelerate PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/batch_sharding.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ordered_prefetcher.cpp
  ${CMAKE_CURRENT_LIST_DIR}/epoch_order.cpp
  ${CMAKE_CURRENT_LIST_DIR}/epoch_steps.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dispatch_message.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dispatch_source.cpp
  ${CMAKE_CURRENT_LIST_DIR}/data_pass.cpp
  ${CMAKE_CURRENT_LIST_DIR}/data_loader_base.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dataset.cpp
  ${CMAKE_CURRENT_LIST_DIR}/data_transfer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/make_data_loader.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mnist.cpp)
