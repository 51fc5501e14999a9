// The models' one-line refusals around their parallel groups: a size a
// group does not divide (checked before anything is split, so that every
// rank refuses alike and none waits on the others), and save_pretrained of
// a model split by tensor parallelism.
#pragma once

#include <cstdint>
#include <string>

#include "accelerate/common/errors.h"
#include "accelerate/nn/tensor_parallel.h"

namespace accelerate::models {

// Error "<model>: <what> <count> is not divisible by <group> <size>".
inline void require_divisible_by_group(const char* model, int64_t count, const std::string& what,
                                       int size, const char* group) {
  if (count % size != 0) {
    throw Error(std::string(model) + ": " + what + " " + std::to_string(count) +
                " is not divisible by " + group + " " + std::to_string(size));
  }
}

// Error "<model>: save_pretrained of a model split over tp_size N would
// write parts of its tensors; ..." when `tp` splits the model.
inline void refuse_saving_split(const char* model, const TensorParallel& tp) {
  if (tp.enabled()) {
    throw Error(std::string(model) + ": save_pretrained of a model split over tp_size " +
                std::to_string(tp.size()) +
                " would write parts of its tensors; save the model built whole");
  }
}

}  // namespace accelerate::models
