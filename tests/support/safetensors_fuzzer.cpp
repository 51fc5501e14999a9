// libFuzzer target for the safetensors header parser (built only with clang:
// see tests/checkpoint/CMakeLists.txt). Input: the bytes of a file. Any
// exception other than accelerate::Error, or any sanitizer report, is a bug.
//   ./checkpoint_safetensors_fuzzer -max_total_time=60 corpus/
#include <cstddef>
#include <cstdint>
#include <string>

#include "accelerate/common/errors.h"
#include "checkpoint/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | data[i];
  if (header_size > size - 8) return 0;  // read_header refuses these before parsing
  try {
    accelerate::safetensors::parse_header(
        std::string(reinterpret_cast<const char*>(data) + 8, header_size), size - 8 - header_size,
        "fuzz");
  } catch (const accelerate::Error&) {
  }
  return 0;
}
