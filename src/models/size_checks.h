// The one-line refusal of a size a parallel group does not divide, as the
// models word it, checked before anything is split so that every rank
// refuses alike and none waits on the others.
#pragma once

#include <cstdint>
#include <string>

#include "accelerate/errors.h"

namespace accelerate::models {

// Error "<model>: <what> <count> is not divisible by <group> <size>".
inline void require_divisible_by_group(const char* model, int64_t count, const std::string& what,
                                       int size, const char* group) {
  if (count % size != 0) {
    throw Error(std::string(model) + ": " + what + " " + std::to_string(count) +
                " is not divisible by " + group + " " + std::to_string(size));
  }
}

}  // namespace accelerate::models
