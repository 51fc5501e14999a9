# LibTorch's TorchConfig.cmake finds libc10 (and kineto, ...) with
# find_library(... PATHS <prefix>/lib), which looks in the system's folders
# first: with Debian's libtorch-dev installed, a build against PyPI's wheel
# linked Debian's libc10.so beside the wheel's own, and every process then
# corrupted its heap at exit (two c10s loaded). Take each library in
# TORCH_LIBRARIES from the found LibTorch's folder when it has one of that
# name.
if(DEFINED TORCH_INSTALL_PREFIX AND IS_DIRECTORY "${TORCH_INSTALL_PREFIX}/lib")
  get_filename_component(_torch_lib_dir "${TORCH_INSTALL_PREFIX}/lib" REALPATH)
  set(_torch_libraries "")
  foreach(_lib IN LISTS TORCH_LIBRARIES)
    if(IS_ABSOLUTE "${_lib}" AND EXISTS "${_lib}")
      get_filename_component(_name "${_lib}" NAME)
      get_filename_component(_dir "${_lib}" DIRECTORY)
      get_filename_component(_dir "${_dir}" REALPATH)
      if(NOT _dir STREQUAL _torch_lib_dir AND EXISTS "${_torch_lib_dir}/${_name}")
        message(STATUS "accelerate: linking ${_torch_lib_dir}/${_name}, not ${_lib} (another LibTorch)")
        set(_lib "${_torch_lib_dir}/${_name}")
      endif()
    endif()
    list(APPEND _torch_libraries "${_lib}")
  endforeach()
  set(TORCH_LIBRARIES ${_torch_libraries})
endif()
