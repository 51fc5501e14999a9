// Reading and writing safetensors files, the tensor format of Hugging Face
// (model.safetensors). Files written here load in Python with
// safetensors.torch.load_file, and files written there load here.
//
//   accelerate::save_safetensors("w.safetensors", {{"fc.weight", w}, {"fc.bias", b}});
//   for (auto& [name, tensor] : accelerate::load_safetensors("w.safetensors")) ...
//
// Supported dtypes: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL.
// Every problem with a file (truncated, malformed header, offsets that
// disagree with shapes, ...) throws accelerate::Error with one line naming
// the file and the tensor. See docs/safetensors.md.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace accelerate {

// Tensors with their names, in a chosen order (state-dict order, file order).
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;
// The header's "__metadata__": free-form strings, e.g. {"format": "pt"}.
using SafetensorsMetadata = std::map<std::string, std::string>;

// Writes `tensors` to `path`. Tensors may live on any device and have any
// strides (they are copied to contiguous CPU memory as needed); names must
// be unique and non-empty. The file is written under a temporary name and
// renamed into place, so `path` never holds a half-written file. Tensors are
// laid out largest element size first, so each is aligned to its element size.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const SafetensorsMetadata& metadata = {});

// Reads every tensor of `path` onto the CPU, in file order. If `metadata` is
// given, it receives the header's metadata.
NamedTensors load_safetensors(const std::string& path, SafetensorsMetadata* metadata = nullptr);

// A validated header plus reads of single tensors, for loading by name
// without reading the whole file.
class SafetensorsReader {
 public:
  // Reads and validates the header; the data is read on demand.
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(SafetensorsReader&&) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&&) noexcept;

  const std::string& path() const;
  std::vector<std::string> names() const;  // file order
  bool contains(const std::string& name) const;
  const SafetensorsMetadata& metadata() const;
  // Throws if `name` is absent or its dtype has no LibTorch equivalent.
  at::ScalarType dtype(const std::string& name) const;
  std::vector<int64_t> shape(const std::string& name) const;

  // The tensor as a new CPU tensor.
  at::Tensor read(const std::string& name) const;
  // Copies the tensor into `destination` (any device or strides), which must
  // have the same shape and dtype; no autograd history is recorded. A
  // contiguous CPU destination is filled straight from the file.
  void read_into(const std::string& name, const at::Tensor& destination) const;
  // The one-line error read_into would throw for `destination`, or "".
  std::string mismatch(const std::string& name, const at::Tensor& destination) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace accelerate
