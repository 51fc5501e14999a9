// Reading and writing a random generator's state under its lock, for the
// checkpoint files (save_state) and activation checkpointing's replay.
// Internal.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <mutex>

namespace accelerate::detail {

// `generator` is a handle: copies share the state they read and write.
inline at::Tensor generator_state(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

inline void set_generator_state(at::Generator generator, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

}  // namespace accelerate::detail
