# Sources of the library's checkpoint area (target_sources on 'accelerate').

# ---- safetensors format, save_model / load_model ----------------------------
# The header parser and file access are torch-free: they go into
# accelerate_common so the CLI (estimate-memory) can read headers too.
target_sources(accelerate_common PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/safetensors_header.cpp
  ${CMAKE_CURRENT_LIST_DIR}/safetensors_io.cpp
  ${CMAKE_CURRENT_LIST_DIR}/safetensors_sharding.cpp
  ${CMAKE_CURRENT_LIST_DIR}/safetensors_layout.cpp)
target_sources(accelerate PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/safetensors_reader.cpp
  ${CMAKE_CURRENT_LIST_DIR}/safetensors_writer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_saving.cpp
  ${CMAKE_CURRENT_LIST_DIR}/safetensors_model_loading.cpp)
# ---- end safetensors ---------------------------------------------------------

# ---- save_state / load_state: checkpoint folders and state items -----------
# File names, the metadata file and the model pieces' index are torch-free:
# `accelerate merge-weights` reads checkpoints with them.
target_sources(accelerate_common PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_files.cpp
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_metadata.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_pieces_index.cpp)
target_sources(accelerate PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_directory.cpp
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_archives.cpp
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_items.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizer_kinds.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizer_reshard.cpp
  ${CMAKE_CURRENT_LIST_DIR}/whole_state_items.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizer_state.cpp)
# ---- end save_state / load_state ---------------------------------------------
