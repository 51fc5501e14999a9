# Sources of the library's trainer area (target_sources on 'accelerate'): the
# Trainer built on the Accelerator (docs/trainer.md). Nothing below it uses it.
target_sources(accelerate PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_folders.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trainer_callback.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trainer_evaluation.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trainer_loop.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trainer_optimizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trainer_deepspeed.cpp
  ${CMAKE_CURRENT_LIST_DIR}/training_arguments.cpp)
