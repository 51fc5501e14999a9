// An optimizer's file(s) in a checkpoint (docs/checkpoint-format.md).
//
// LibTorch's built-in SGD, Adam, AdamW, Adagrad and RMSprop: the per-
// parameter state tensors go to a safetensors file (`optimizer.safetensors`,
// written at disk speed), and `optimizer.bin` is a small torch archive with
// the rest (param groups and their options, steps, which state tensors each
// parameter has, the tensor file's name). Any other optimizer (LBFGS, user
// types): `Optimizer::save` into `optimizer.bin`, as format version 1 did.
// Internal to the library.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace accelerate::checkpoint {

// Writes `optimizer` to `archive_path`, and its state tensors to
// `tensor_path` when it is a built-in type. `written(path)` is called as each
// file is complete (to start its write-back).
void save_optimizer_state(const torch::optim::Optimizer& optimizer, const std::string& archive_path,
                          const std::string& tensor_path,
                          const std::function<void(const std::string&)>& written);

// A saved optimizer state, read and checked against `optimizer` but not yet
// applied: the constructor reads `archive_path` (either format) and, for the
// split format, the header of the tensor file it names, and throws
// accelerate::Error naming the file (and tensor) when something is missing,
// unreadable or has another shape. apply() then restores it: options, steps
// and state tensors (created with each parameter's dtype and device, or read
// into the optimizer's current one for that parameter and field when nothing
// else references it and it has that layout).
class PendingOptimizerState {
 public:
  PendingOptimizerState(torch::optim::Optimizer& optimizer, const std::string& archive_path);
  ~PendingOptimizerState();
  PendingOptimizerState(PendingOptimizerState&&) noexcept;
  PendingOptimizerState& operator=(PendingOptimizerState&&) noexcept;

  void apply();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace accelerate::checkpoint
