# Sources of the library's sharding area (target_sources on 'accelerate'):
# the ZeRO engine that shards optimizer state and gradients over a prepared
# model's gradient buckets. The LibTorch-free DeepSpeed config reader is in
# config_sources.cmake (part of 'accelerate_common').
target_sources(accelerate PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/deepspeed_objects.cpp
  ${CMAKE_CURRENT_LIST_DIR}/deepspeed_file_objects.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dummy_objects.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_state_files.cpp
  ${CMAKE_CURRENT_LIST_DIR}/parameter_units.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quantized_collectives.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shard_layout.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sharded_engine.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sharded_state_items.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sharding_settings.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tensor_parallel_state.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unit_policy.cpp
  ${CMAKE_CURRENT_LIST_DIR}/zero_optimizer.cpp)
