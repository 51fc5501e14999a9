# Sources of the library's schedule area (target_sources on 'accelerate'):
# Hugging Face's and DeepSpeed's learning-rate schedules. Below the engines
# (a DeepSpeed config file's scheduler section builds one) and the Trainer,
# which both use them.
target_sources(accelerate PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/deepspeed_schedule.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lr_schedule.cpp)
