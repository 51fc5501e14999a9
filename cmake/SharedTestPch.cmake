# The programs outside the test binaries that include all of <torch/torch.h>
# (examples, benchmarks, the tests' probe programs, the sanity program) reuse
# the tests' precompiled header (tests/support/pch.h). Without it each took
# ~17 s to compile, once per LibTorch generation in the test command; see
# docs/building.md, "Build speed".
#
# Call accelerate_reuse_test_pch_in_programs() once, after every directory was
# added: it finds the executables and static libraries that link
# accelerate::accelerate (or LibTorch alone, or such a static library, as the
# GPT programs link examples' gpt_model) and have no precompiled header of
# their own, so a new program needs nothing here.

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
  # Which targets compile LibTorch code: those linking it, or linking a static
  # library that does (found in as many passes as such libraries nest).
  set(torch_users accelerate::accelerate torch)
  set(programs "")
  set(changed TRUE)
  while(changed)
    set(changed FALSE)
    foreach(target IN LISTS targets)
      if(target IN_LIST programs)
        continue()
      endif()
      get_target_property(type ${target} TYPE)
      get_target_property(libs ${target} LINK_LIBRARIES)
      get_target_property(own ${target} PRECOMPILE_HEADERS)
      get_target_property(reused ${target} PRECOMPILE_HEADERS_REUSE_FROM)
      if(NOT type MATCHES "^(EXECUTABLE|STATIC_LIBRARY)$" OR own OR reused OR NOT libs)
        continue()
      endif()
      foreach(lib IN LISTS libs)
        if(lib IN_LIST torch_users)
          list(APPEND programs ${target})
          list(APPEND torch_users ${target})
          set(changed TRUE)
          break()
        endif()
      endforeach()
    endforeach()
  endwhile()
  foreach(target IN LISTS programs)
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
  endforeach()
endfunction()
