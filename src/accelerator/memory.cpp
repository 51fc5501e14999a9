#include "accelerate/accelerator/memory.h"

#include <string>

#include <c10/util/Exception.h>

#include "accelerate/common/errors.h"
#include "compat/memory_compat.h"

namespace accelerate {

bool is_out_of_memory_error(const std::exception& error) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&error) != nullptr) return true;
  // Allocator messages, for LibTorch versions without a dedicated type.
  const std::string text = error.what();
  return text.find("out of memory") != std::string::npos ||
         text.find("can't allocate memory") != std::string::npos;
}

namespace detail {

void throw_no_batch_size() { throw Error("No executable batch size found, reached zero."); }

void release_cached_memory() { compat::empty_cuda_cache(); }

}  // namespace detail
}  // namespace accelerate
