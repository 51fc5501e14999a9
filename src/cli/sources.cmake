# Sources of the command line's subcommands (target_sources on
# 'accelerate_cli_core'): every command's entry point (launch, config, env,
# test, estimate-memory, merge-weights) and the sanity program that `accelerate test`
# launches. The launch and config commands drive src/launcher/ and src/config/.
target_sources(accelerate_cli_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/launch_command.cpp
  ${CMAKE_CURRENT_LIST_DIR}/config_command.cpp
  ${CMAKE_CURRENT_LIST_DIR}/env_command.cpp
  ${CMAKE_CURRENT_LIST_DIR}/system_facts.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_command.cpp
  ${CMAKE_CURRENT_LIST_DIR}/estimate_memory_command.cpp
  ${CMAKE_CURRENT_LIST_DIR}/memory_estimate.cpp
  ${CMAKE_CURRENT_LIST_DIR}/training_estimate.cpp
  ${CMAKE_CURRENT_LIST_DIR}/training_report.cpp
  ${CMAKE_CURRENT_LIST_DIR}/training_traffic.cpp
  ${CMAKE_CURRENT_LIST_DIR}/transformer_shape.cpp
  ${CMAKE_CURRENT_LIST_DIR}/merge_weights.cpp
  ${CMAKE_CURRENT_LIST_DIR}/merge_weights_command.cpp
  ${CMAKE_CURRENT_LIST_DIR}/merge_checkpoint.cpp
  ${CMAKE_CURRENT_LIST_DIR}/safetensors_model_size.cpp)

# ---- Build facts for `accelerate env` ---------------------------------------
# The CLI links no LibTorch, so what it reports about LibTorch is what
# configure found: the version of find_package(Torch) and the compat probes.
set(_cli_has_gloo 0)
foreach(_t torch torch_cpu)
  if(TARGET ${_t})
    get_target_property(_defs ${_t} INTERFACE_COMPILE_DEFINITIONS)
    if(_defs MATCHES "USE_C10D_GLOO|USE_GLOO")
      set(_cli_has_gloo 1)
    endif()
  endif()
endforeach()
set(_cli_has_cuda 0)
if(TARGET torch_cuda OR TARGET torch_hip OR ACCELERATE_COMPAT_HAS_CUDA_ALLOCATOR)
  set(_cli_has_cuda 1)
endif()
set(_cli_torch_version "${Torch_VERSION}")
if(NOT _cli_torch_version)
  set(_cli_torch_version "unknown")
endif()
# Only env_command.cpp sees them, so a reconfigure rebuilds one file.
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/env_command.cpp PROPERTIES COMPILE_DEFINITIONS
  "ACCELERATE_BUILD_TORCH_VERSION=\"${_cli_torch_version}\";ACCELERATE_BUILD_COMPILER=\"${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}\";ACCELERATE_BUILD_TYPE=\"${CMAKE_BUILD_TYPE}\";ACCELERATE_BUILD_HAS_CUDA=${_cli_has_cuda};ACCELERATE_BUILD_HAS_NCCL=${ACCELERATE_COMPAT_HAS_NCCL};ACCELERATE_BUILD_HAS_GLOO=${_cli_has_gloo}")

# ---- The sanity program of `accelerate test` --------------------------------
# It links the library (and so LibTorch); `accelerate` finds it next to itself
# in the build tree and in <prefix>/libexec/accelerate once installed.
set(ACCELERATE_SANITY_INSTALL_DIR ${CMAKE_INSTALL_LIBEXECDIR}/accelerate)
file(RELATIVE_PATH _cli_libexec_from_bin
  ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR} ${CMAKE_INSTALL_PREFIX}/${ACCELERATE_SANITY_INSTALL_DIR})
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/test_command.cpp PROPERTIES COMPILE_DEFINITIONS
  "ACCELERATE_LIBEXEC_FROM_BIN=\"${_cli_libexec_from_bin}\"")

add_executable(accelerate_sanity_check ${CMAKE_CURRENT_LIST_DIR}/sanity_program.cpp)
target_link_libraries(accelerate_sanity_check PRIVATE accelerate::accelerate)
# src/: it reads the settings contract (common/settings.h) like the library.
target_include_directories(accelerate_sanity_check PRIVATE ${PROJECT_SOURCE_DIR}/src)
file(RELATIVE_PATH _cli_lib_from_libexec
  ${CMAKE_INSTALL_PREFIX}/${ACCELERATE_SANITY_INSTALL_DIR} ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR})
set_target_properties(accelerate_sanity_check PROPERTIES
  OUTPUT_NAME accelerate-sanity-check
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin
  INSTALL_RPATH "$ORIGIN/${_cli_lib_from_libexec}"
  INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS accelerate_sanity_check RUNTIME DESTINATION ${ACCELERATE_SANITY_INSTALL_DIR})

# ---- The optimizer merger of `accelerate merge-weights --include_optimizer` --
# A ZeRO shard's optimizer archive is a LibTorch archive, so merging it needs
# LibTorch: a helper found like the sanity program (next to `accelerate` in
# the build tree, in libexec once installed).
add_executable(accelerate_merge_optimizer ${CMAKE_CURRENT_LIST_DIR}/optimizer_merge_program.cpp)
target_link_libraries(accelerate_merge_optimizer PRIVATE accelerate::accelerate)
target_include_directories(accelerate_merge_optimizer PRIVATE ${PROJECT_SOURCE_DIR}/src)
set_target_properties(accelerate_merge_optimizer PROPERTIES
  OUTPUT_NAME accelerate-merge-optimizer
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin
  INSTALL_RPATH "$ORIGIN/${_cli_lib_from_libexec}"
  INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS accelerate_merge_optimizer RUNTIME DESTINATION ${ACCELERATE_SANITY_INSTALL_DIR})
