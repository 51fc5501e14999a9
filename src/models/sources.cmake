# The models area: transformers' architectures as LibTorch modules, with
# Hugging Face folders in and out (docs/models.md). A library of its own
# above the Accelerator, like a user's model: nothing in 'accelerate' uses it.
add_library(accelerate_models SHARED
  ${CMAKE_CURRENT_LIST_DIR}/bert_config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bert_heads.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bert_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/causal_lm_loss.cpp
  ${CMAKE_CURRENT_LIST_DIR}/config_json.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gpt2_config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gpt2_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gpt2_pretrained.cpp
  ${CMAKE_CURRENT_LIST_DIR}/llama_config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/llama_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pretrained_weights.cpp)
add_library(accelerate::models ALIAS accelerate_models)
set_target_properties(accelerate_models PROPERTIES
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
  EXPORT_NAME models)
# src/ for the internal safetensors index and strict JSON readers the
# library exports.
target_include_directories(accelerate_models PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_link_libraries(accelerate_models PUBLIC accelerate)
