# Reading DeepSpeed JSON config files (deepspeed_config_file) for ZeRO, and
# the launch settings that select ZeRO (plugin_from_environment):
# LibTorch-free, so it joins 'accelerate_common', the OBJECT library linked
# into both the library and the command line (so `accelerate` can check
# these files before it starts any process).
target_sources(accelerate_common PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/deepspeed_config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/deepspeed_config_resolve.cpp
  ${CMAKE_CURRENT_LIST_DIR}/json_input.cpp
  # ZeRO++ hpZ's group size (zero_hpz_partition_size), judged by ranks and launcher alike.
  ${CMAKE_CURRENT_LIST_DIR}/hpz_partition.cpp
  # Accelerate 1.x's ParallelismConfig sizes (dp_replicate_size x dp_shard_size).
  ${CMAKE_CURRENT_LIST_DIR}/parallelism_sizes.cpp
  # The DeepSpeedPlugin a launched program gets from its environment.
  ${CMAKE_CURRENT_LIST_DIR}/plugin_from_environment.cpp)
