# Sources of the command line's launcher area (target_sources on
# 'accelerate_cli_core'): flags, process supervision, rendezvous settings,
# and the config file and Slurm defaults applied to launch options. The
# `accelerate launch` command itself is in src/cli/.
target_sources(accelerate_cli_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/launch_options.cpp
  ${CMAKE_CURRENT_LIST_DIR}/launch_flags.cpp
  ${CMAKE_CURRENT_LIST_DIR}/launch_help.cpp
  ${CMAKE_CURRENT_LIST_DIR}/launch_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/supervisor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/child_environment.cpp
  ${CMAKE_CURRENT_LIST_DIR}/machine_facts.cpp
  ${CMAKE_CURRENT_LIST_DIR}/program_resolution.cpp
  ${CMAKE_CURRENT_LIST_DIR}/port_check.cpp
  ${CMAKE_CURRENT_LIST_DIR}/network_checks.cpp
  ${CMAKE_CURRENT_LIST_DIR}/slurm_defaults.cpp
  ${CMAKE_CURRENT_LIST_DIR}/config_application.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sharding_check.cpp
  ${CMAKE_CURRENT_LIST_DIR}/mpirun_command.cpp
  ${CMAKE_CURRENT_LIST_DIR}/output_relay.cpp
  ${CMAKE_CURRENT_LIST_DIR}/signal_pipe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/rank_spawn.cpp
  # The library's route-to-address helper (torch-free), shared rather than
  # written twice: the launcher checks the same route the ranks will use.
  ${CMAKE_CURRENT_LIST_DIR}/../distributed/network.cpp)
