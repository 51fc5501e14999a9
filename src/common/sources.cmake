# LibTorch-free sources shared by the library and the command line
# (target_sources on 'accelerate_common', an OBJECT library linked into both):
# the process environment, the launcher-to-program settings contract, job
# state, and small text and system helpers. Nothing here may include LibTorch:
# the CLI links these objects and must start in milliseconds.
target_sources(accelerate_common PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/backend.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bf16_hardware.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cpu_capability.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cpu_info.cpp
  ${CMAKE_CURRENT_LIST_DIR}/distributed_type.cpp
  ${CMAKE_CURRENT_LIST_DIR}/edit_distance.cpp
  ${CMAKE_CURRENT_LIST_DIR}/environment.cpp
  ${CMAKE_CURRENT_LIST_DIR}/environment_text.cpp
  ${CMAKE_CURRENT_LIST_DIR}/free_port.cpp
  ${CMAKE_CURRENT_LIST_DIR}/job_state.cpp
  ${CMAKE_CURRENT_LIST_DIR}/kernel_settings.cpp
  ${CMAKE_CURRENT_LIST_DIR}/log_level.cpp
  ${CMAKE_CURRENT_LIST_DIR}/malloc_tuning.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mixed_precision.cpp
  ${CMAKE_CURRENT_LIST_DIR}/replace_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/openblas_core.cpp
  ${CMAKE_CURRENT_LIST_DIR}/parallelism_settings.cpp
  ${CMAKE_CURRENT_LIST_DIR}/setting_values.cpp
  ${CMAKE_CURRENT_LIST_DIR}/settings.cpp
  ${CMAKE_CURRENT_LIST_DIR}/settings_list.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shared_memory_names.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sharding_launch_settings.cpp
  ${CMAKE_CURRENT_LIST_DIR}/slurm_lists.cpp
  ${CMAKE_CURRENT_LIST_DIR}/strict_json.cpp)
