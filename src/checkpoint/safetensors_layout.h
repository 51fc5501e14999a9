// Where a safetensors file puts each tensor, and its header bytes: the one
// layout every writer uses (save_safetensors, the streamed ZeRO-3 saves,
// `accelerate merge-weights`), so files of the same tensors are the same
// bytes whichever wrote them. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace accelerate::safetensors {

struct TensorSpec {
  std::string name;
  std::string dtype;  // "F32", "BF16", ...
  std::vector<int64_t> shape;
};

struct FileLayout {
  // The file's first bytes: u64 little-endian header length, then the JSON
  // header padded with spaces to a multiple of 8.
  std::string prefix;
  // Indices into the specs, in the order their data lies in the file.
  std::vector<std::size_t> order;
  // By spec index: where its bytes start in the file, and how many.
  std::vector<uint64_t> offsets, sizes;
};

// As Hugging Face's writer lays a file out: tensors with larger elements
// first (so each is aligned to its element size), ties in the given order;
// the header lists them in that order after "__metadata__" (omitted when
// empty). Throws Error "cannot write safetensors file '<path>': ..." for an
// empty, reserved or repeated name, an unknown dtype or bad UTF-8.
FileLayout layout_file(const std::string& path, const std::vector<TensorSpec>& tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace accelerate::safetensors
