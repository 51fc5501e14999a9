// ACCELERATE_ARG: a typed option with a chainable setter and a getter, in the
// style of LibTorch's TORCH_ARG, so options read like Accelerate's keyword
// arguments:  JobOptions().cpu(true).timeout(std::chrono::seconds(30))
#pragma once

#include <utility>

#define ACCELERATE_ARG(T, name)                                   \
 public:                                                          \
  inline auto name(const T& new_##name)->decltype(*this) {        \
    this->name##_ = new_##name;                                   \
    return *this;                                                 \
  }                                                               \
  inline auto name(T&& new_##name)->decltype(*this) {             \
    this->name##_ = std::move(new_##name);                        \
    return *this;                                                 \
  }                                                               \
  inline const T& name() const noexcept { return this->name##_; } \
  inline T& name() noexcept { return this->name##_; }             \
                                                                  \
 private:                                                         \
  T name##_
