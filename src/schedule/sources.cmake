# Sources of the library's schedule area (target_sources on 'accelerate'):
# Hugging Face's and DeepSpeed's learning-rate schedules, and transformers'
# Adafactor optimizer (optimization.py holds both), and FusedAdamW. Below the engines
# (a DeepSpeed config file's scheduler section builds one) and the Trainer,
# which both use them.
target_sources(accelerate PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/adafactor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/adamw_kernel.cpp
  ${CMAKE_CURRENT_LIST_DIR}/deepspeed_schedule.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fused_adamw.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lr_schedule.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lr_scheduler_kwargs.cpp
  ${CMAKE_CURRENT_LIST_DIR}/reduce_lr_on_plateau.cpp)
# FusedAdamW's loop: GCC vectorizes it, and its sqrt, only at -O3 and
# without errno (no sqrt of a negative there: v >= 0). Outside unity batches
# and the precompiled header (built with errno), so the flags stay here;
# -fno-trapping-math as for the nn kernels (src/nn/sources.cmake).
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/adamw_kernel.cpp PROPERTIES
  SKIP_UNITY_BUILD_INCLUSION ON SKIP_PRECOMPILE_HEADERS ON
  COMPILE_OPTIONS "$<$<OR:$<CXX_COMPILER_ID:GNU>,$<CXX_COMPILER_ID:Clang>>:-O3;-fno-math-errno;-fno-trapping-math>")
