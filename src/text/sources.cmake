# Sources of the library's text area (target_sources on 'accelerate'): the
# byte-level BPE tokenizer. LibTorch-free, so tests/text builds them into a
# test binary that does not link LibTorch; ACCELERATE_TEXT_SOURCES names them
# for it. The number parsers they use come from src/common.
set(ACCELERATE_TEXT_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/pre_split.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bpe_training.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bpe_tokenizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bpe_file.cpp)
target_sources(accelerate PRIVATE ${ACCELERATE_TEXT_SOURCES})
