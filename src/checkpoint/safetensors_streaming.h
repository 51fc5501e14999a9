// A safetensors file written tensor by tensor, in any order: what a ZeRO-3
// save needs, where a unit's weights are whole only while it is gathered and
// no process may hold the whole model at once. Internal to the library.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include "accelerate/checkpoint/safetensors.h"

namespace accelerate::safetensors {

class StreamedFile {
 public:
  // Writes the header for `layout`'s names, dtypes and shapes (their data is
  // not read: freed ZeRO-3 weights keep their shape) to a temporary file
  // beside `path`. The same checks and layout as save_safetensors.
  StreamedFile(std::string path, const NamedTensors& layout, const SafetensorsMetadata& metadata);
  // Removes the temporary file unless commit() succeeded.
  ~StreamedFile();
  StreamedFile(const StreamedFile&) = delete;
  StreamedFile& operator=(const StreamedFile&) = delete;

  bool expects(const std::string& name) const { return places_.count(name) > 0; }
  // `tensor`'s bytes at the place of `name` (declared, same dtype and shape).
  void write(const std::string& name, const at::Tensor& tensor);
  // Every declared tensor written (else Error naming the first missing):
  // closes the file and renames it to its path.
  void commit();

 private:
  struct Place {
    std::uint64_t offset = 0;  // in the file
    std::uint64_t nbytes = 0;
    at::ScalarType dtype = at::kFloat;
    bool written = false;
  };
  std::string path_;
  std::string temporary_;
  std::map<std::string, Place> places_;
  struct Output;
  std::unique_ptr<Output> file_;
  bool committed_ = false;
};

}  // namespace accelerate::safetensors
