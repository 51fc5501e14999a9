// find_executable_batch_size: retry a step with a smaller batch when it runs
// out of memory, as Accelerate's decorator does.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>

namespace accelerate {

// True for LibTorch's out-of-memory errors (CUDA or CPU allocator).
bool is_out_of_memory_error(const std::exception& error);

// Calls fn(batch_size) starting at `starting_batch_size`; whenever it throws
// an out-of-memory error, frees what it can and retries with
// int(batch_size * 0.9). Returns fn's result for the first batch size that
// fits. Throws accelerate::Error("No executable batch size found, reached
// zero.") when the size reaches 0; other exceptions pass through.
template <class Fn>
auto find_executable_batch_size(Fn&& fn, int64_t starting_batch_size)
    -> decltype(fn(starting_batch_size));

namespace detail {
[[noreturn]] void throw_no_batch_size();
void release_cached_memory();
}  // namespace detail

template <class Fn>
auto find_executable_batch_size(Fn&& fn, int64_t starting_batch_size)
    -> decltype(fn(starting_batch_size)) {
  int64_t batch_size = starting_batch_size;
  while (true) {
    if (batch_size <= 0) detail::throw_no_batch_size();
    try {
      return fn(batch_size);
    } catch (const std::exception& error) {
      if (!is_out_of_memory_error(error)) throw;
      detail::release_cached_memory();
      batch_size = static_cast<int64_t>(static_cast<double>(batch_size) * 0.9);
    }
  }
}

}  // namespace accelerate
