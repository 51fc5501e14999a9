# Sources of the command line's config area (target_sources on
# 'accelerate_cli_core'): the YAML config file and the questionnaire. Nothing
# here includes the launcher's headers (the launcher applies the file to its
# options); the `accelerate config` command is in src/cli/.
find_package(yaml-cpp REQUIRED)
# yaml-cpp 0.8 (Debian 13) names its target yaml-cpp::yaml-cpp and keeps
# plain yaml-cpp only as a deprecated alias; 0.7 (Debian 12) has only yaml-cpp.
if(TARGET yaml-cpp::yaml-cpp)
  set(ACCELERATE_YAML_CPP_TARGET yaml-cpp::yaml-cpp)
else()
  set(ACCELERATE_YAML_CPP_TARGET yaml-cpp)
endif()
target_sources(accelerate_cli_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/config_keys.cpp
  ${CMAKE_CURRENT_LIST_DIR}/config_yaml.cpp
  ${CMAKE_CURRENT_LIST_DIR}/config_load.cpp
  ${CMAKE_CURRENT_LIST_DIR}/config_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/config_files.cpp
  ${CMAKE_CURRENT_LIST_DIR}/line_prompter.cpp
  ${CMAKE_CURRENT_LIST_DIR}/terminal_prompter.cpp
  ${CMAKE_CURRENT_LIST_DIR}/questionnaire.cpp)
# PRIVATE: yaml-cpp stays out of every header outside src/config/.
target_link_libraries(accelerate_cli_core PRIVATE ${ACCELERATE_YAML_CPP_TARGET})
