# Sources of the library's trainer area (target_sources on 'accelerate'):
# Hugging Face's and DeepSpeed's learning-rate schedules, and the Trainer built on the
# Accelerator (docs/trainer.md).
target_sources(accelerate PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_folders.cpp
  ${CMAKE_CURRENT_LIST_DIR}/deepspeed_schedule.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lr_schedule.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trainer_loop.cpp
  ${CMAKE_CURRENT_LIST_DIR}/training_arguments.cpp)
