# Sources of the library's schedule area (target_sources on 'accelerate'):
# Hugging Face's and DeepSpeed's learning-rate schedules, and transformers'
# Adafactor optimizer (optimization.py holds both). Below the engines
# (a DeepSpeed config file's scheduler section builds one) and the Trainer,
# which both use them.
target_sources(accelerate PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/adafactor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/deepspeed_schedule.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lr_schedule.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lr_scheduler_kwargs.cpp
  ${CMAKE_CURRENT_LIST_DIR}/reduce_lr_on_plateau.cpp)
