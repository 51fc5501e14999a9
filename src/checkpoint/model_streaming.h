// Saving a model whose weights are whole only a part at a time (ZeRO-3: a
// unit's weights exist on a process only while the unit is gathered), so
// that no process ever holds the whole model: the main process declares every
// file up front and writes each part's tensors while that part is whole.
// Internal to the library.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "accelerate/checkpoint/model_saving.h"
#include "accelerate/checkpoint/safetensors.h"

namespace accelerate::checkpoint {

// module_state_dict without tied duplicates: a tensor registered under two
// names (the same memory, the same view) is kept under its first, as
// save_model writes it (safetensors cannot alias).
NamedTensors unique_state_dict(const torch::nn::Module& module);

// The parts of a model that are whole only on demand. gather and release
// are collectives: every process calls them for the same parts in the same
// order.
class WeightGroups {
 public:
  virtual ~WeightGroups() = default;
  virtual std::size_t count() const = 0;
  // Part g's tensors (the module's own; whole between gather(g) and release(g)).
  virtual std::vector<at::Tensor> tensors(std::size_t g) const = 0;
  virtual void gather(std::size_t g) = 0;
  virtual void release(std::size_t g) = 0;
};

// One safetensors file to write, and the tensors in it.
struct FileContents {
  std::string path;
  NamedTensors tensors;
  SafetensorsMetadata metadata;
};

// Every process calls it. `write`: this process writes `files` (the others
// pass none): tensors of no part first, then each part's while it is whole.
// Returns the writing process's error ("" for none; partial files are
// removed): an error does not stop the gathers, so no process is left
// waiting in one.
// `floating_dtype`: floating-point tensors are written in it (DeepSpeed's
// zero3_save_16bit_model under fp16/bf16); nullopt: in their own.
std::string write_by_groups(const std::vector<FileContents>& files, WeightGroups& groups,
                            bool write,
                            std::optional<at::ScalarType> floating_dtype = std::nullopt);

// save_model (model_saving.h) for such a model: the same files, index and
// stale-file cleanup, written by the process where `write` is true (the
// pickle format needs every tensor at once: all parts are gathered for it).
// Every process calls it; returns the files written and sets `error`
// (writing process only) instead of throwing.
std::vector<std::string> save_model_by_groups(
    const torch::nn::Module& module, const std::string& save_directory,
    const SaveModelOptions& options, WeightGroups& groups, bool write, std::string* error,
    std::optional<at::ScalarType> floating_dtype = std::nullopt);

}  // namespace accelerate::checkpoint
