# Sources of the library's tracking area (target_sources on 'accelerate').
#
# The LibTorch-free part is an object library, accelerate_tracking, linked
# into 'accelerate' and directly into the fast torch-free tests.
#
# TensorBoard support needs libprotobuf and protoc; without them the library
# still builds and log_with "tensorboard" fails with a ConfigError. The schema
# is generated for the lite runtime (no global descriptor registration) but
# linked against the full libprotobuf: Debian's LibTorch already loads it, and
# libprotobuf-lite beside it would put two copies of the same symbols in one
# process. It is linked PRIVATE, so it is not part of the installed package's
# interface (accelerateConfig.cmake requires only Torch).
option(ACCELERATE_WITH_TENSORBOARD "Write TensorBoard event files (needs protobuf)" ON)

add_library(accelerate_tracking OBJECT
  ${CMAKE_CURRENT_LIST_DIR}/buffered_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/crc32c.cpp
  ${CMAKE_CURRENT_LIST_DIR}/file_trackers.cpp
  ${CMAKE_CURRENT_LIST_DIR}/progress_bar.cpp
  ${CMAKE_CURRENT_LIST_DIR}/python_number.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tfrecord.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tracker_value.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trackers.cpp)
target_include_directories(accelerate_tracking PUBLIC
  ${CMAKE_CURRENT_SOURCE_DIR}/include ${CMAKE_CURRENT_SOURCE_DIR}/src)
find_package(Threads REQUIRED)
target_link_libraries(accelerate_tracking PUBLIC Threads::Threads)

set(ACCELERATE_HAVE_TENSORBOARD OFF)
if(ACCELERATE_WITH_TENSORBOARD)
  find_package(Protobuf QUIET)
  if(Protobuf_FOUND AND TARGET protobuf::protoc AND Protobuf_LIBRARIES)
    set(ACCELERATE_HAVE_TENSORBOARD ON)
  endif()
endif()

if(ACCELERATE_HAVE_TENSORBOARD)
  # protoc directly rather than protobuf_generate(), whose output paths
  # differ between CMake versions.
  set(_tracking_proto_dir ${CMAKE_BINARY_DIR}/generated/tracking)
  file(MAKE_DIRECTORY ${_tracking_proto_dir})
  set(_tracking_pb ${_tracking_proto_dir}/tensorboard_events.pb)
  add_custom_command(
    OUTPUT ${_tracking_pb}.cc ${_tracking_pb}.h
    COMMAND protobuf::protoc --cpp_out=${_tracking_proto_dir}
            -I ${CMAKE_CURRENT_LIST_DIR} ${CMAKE_CURRENT_LIST_DIR}/tensorboard_events.proto
    DEPENDS ${CMAKE_CURRENT_LIST_DIR}/tensorboard_events.proto protobuf::protoc
    COMMENT "protoc tensorboard_events.proto")
  target_sources(accelerate_tracking PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/event_file_writer.cpp
    ${CMAKE_CURRENT_LIST_DIR}/tensorboard_tracker.cpp
    ${_tracking_pb}.cc)
  target_include_directories(accelerate_tracking PUBLIC ${_tracking_proto_dir} ${Protobuf_INCLUDE_DIRS})
  # By path, not the protobuf::libprotobuf target: a LibTorch 2.x wheel's
  # CMake files define that name as an alias of an empty target when it does
  # not exist yet (find_package(Torch) runs first), which would link nothing.
  target_link_libraries(accelerate_tracking PUBLIC ${Protobuf_LIBRARIES})
  target_link_libraries(accelerate PRIVATE ${Protobuf_LIBRARIES})
  message(STATUS "accelerate: TensorBoard tracker with protobuf ${Protobuf_VERSION}")
else()
  target_sources(accelerate_tracking PRIVATE ${CMAKE_CURRENT_LIST_DIR}/tensorboard_unavailable.cpp)
  message(STATUS "accelerate: no TensorBoard tracker (ACCELERATE_WITH_TENSORBOARD off, or no protobuf/protoc)")
endif()

target_sources(accelerate PRIVATE
  $<TARGET_OBJECTS:accelerate_tracking>
  ${CMAKE_CURRENT_LIST_DIR}/logging.cpp)
target_link_libraries(accelerate PRIVATE Threads::Threads)
