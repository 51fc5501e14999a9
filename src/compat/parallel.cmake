# compat/parallel_ranges.cpp: at::parallel_for forks only in code compiled
# with OpenMP when LibTorch's parallel backend is OpenMP (parallel_ranges.h
# says why): that one source gets the flag, and the library links the
# runtime LibTorch already loads (libgomp.so.1, one copy by its soname).
# Without OpenMP the library's kernels run on one thread.
find_package(OpenMP COMPONENTS CXX)
target_sources(accelerate PRIVATE ${CMAKE_CURRENT_LIST_DIR}/parallel_ranges.cpp)
if(OpenMP_CXX_FOUND)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/parallel_ranges.cpp PROPERTIES
    COMPILE_OPTIONS "${OpenMP_CXX_FLAGS}"
    SKIP_PRECOMPILE_HEADERS ON
    SKIP_UNITY_BUILD_INCLUSION ON)
  # The library only, not OpenMP::OpenMP_CXX: its -fopenmp would reach every
  # source of the library.
  target_link_libraries(accelerate PRIVATE ${OpenMP_CXX_LIBRARIES})
endif()
