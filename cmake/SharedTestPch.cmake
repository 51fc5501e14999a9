# The programs outside the test binaries that include all of <torch/torch.h>
# (examples, benchmarks, the tests' probe programs, the sanity program) reuse
# the tests' precompiled header (tests/support/pch.h). Without it each took
# ~17 s to compile, once per LibTorch generation in the test command; see
# docs/building.md, "Build speed".
#
# Call accelerate_reuse_test_pch_in_programs() once, after every directory was
# added: it finds the executables that link accelerate::accelerate (or LibTorch
# alone) and have no precompiled header of their own, so a new program needs
# nothing here.

function(_accelerate_targets_below dir out)
  get_property(found DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(subdir IN LISTS subdirs)
    _accelerate_targets_below(${subdir} below)
    list(APPEND found ${below})
  endforeach()
  set(${out} ${found} PARENT_SCOPE)
endfunction()

function(accelerate_reuse_test_pch_in_programs)
  if(NOT TARGET accelerate_test_pch)
    return()  # tests not built: nothing to share
  endif()
  _accelerate_targets_below(${PROJECT_SOURCE_DIR} targets)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    get_target_property(libs ${target} LINK_LIBRARIES)
    get_target_property(own ${target} PRECOMPILE_HEADERS)
    get_target_property(reused ${target} PRECOMPILE_HEADERS_REUSE_FROM)
    if(type STREQUAL "EXECUTABLE" AND ("accelerate::accelerate" IN_LIST libs OR "torch" IN_LIST libs)
       AND NOT own AND NOT reused)
      # The same code model and macros as the header's owner, or GCC ignores
      # the header (GoogleTest's targets add -DGTEST_HAS_PTHREAD=1).
      set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
      # The header's optimization level too: GCC 12 crashed compiling an -O2
      # source with an -O1 header.
      target_compile_options(${target} PRIVATE ${ACCELERATE_TEST_OPTIMIZATION})
      foreach(gtest_target GTest::gtest GTest::gmock)
        target_compile_options(${target} PRIVATE
          $<TARGET_PROPERTY:${gtest_target},INTERFACE_COMPILE_OPTIONS>)
        target_compile_definitions(${target} PRIVATE
          $<TARGET_PROPERTY:${gtest_target},INTERFACE_COMPILE_DEFINITIONS>)
      endforeach()
      target_precompile_headers(${target} REUSE_FROM accelerate_test_pch)
    endif()
  endforeach()
endfunction()
