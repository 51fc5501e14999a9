#include "checkpoint/safetensors_layout.h"

#include <algorithm>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "accelerate/common/errors.h"
#include "checkpoint/safetensors_header.h"

namespace accelerate::safetensors {
namespace {

[[noreturn]] void layout_failure(const std::string& path, const std::string& problem) {
  throw Error("cannot write safetensors file '" + path + "': " + problem);
}

}  // namespace

FileLayout layout_file(const std::string& path, const std::vector<TensorSpec>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  FileLayout layout;
  std::vector<std::size_t> element_sizes;
  std::set<std::string> seen;
  for (const TensorSpec& tensor : tensors) {
    const std::string shown = printable(tensor.name);
    if (tensor.name.empty()) layout_failure(path, "a tensor has an empty name");
    if (tensor.name == "__metadata__") {
      layout_failure(path, "'__metadata__' is reserved and cannot name a tensor");
    }
    if (!seen.insert(tensor.name).second)
      layout_failure(path, "tensor name '" + shown + "' appears twice");
    const std::size_t element_size = dtype_size(tensor.dtype);
    if (element_size == 0) {
      layout_failure(path,
                     "tensor '" + shown + "' has unknown dtype '" + printable(tensor.dtype) + "'");
    }
    uint64_t elements = 1;
    for (int64_t dim : tensor.shape) elements *= static_cast<uint64_t>(dim);
    element_sizes.push_back(element_size);
    layout.sizes.push_back(elements * element_size);
  }
  layout.order.resize(tensors.size());
  std::iota(layout.order.begin(), layout.order.end(), std::size_t{0});
  std::stable_sort(layout.order.begin(), layout.order.end(), [&](std::size_t a, std::size_t b) {
    return element_sizes[a] > element_sizes[b];
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (std::size_t i : layout.order) {
    header[tensors[i].name] = {{"dtype", tensors[i].dtype},
                               {"shape", tensors[i].shape},
                               {"data_offsets", {offset, offset + layout.sizes[i]}}};
    offset += layout.sizes[i];
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    layout_failure(path, std::string("a tensor name or metadata string is not valid UTF-8 (") +
                             e.what() + ")");
  }
  // Spaces up to a multiple of 8, as Hugging Face pads, so data is aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  layout.prefix.resize(8);
  for (int i = 0; i < 8; ++i)
    layout.prefix[i] = static_cast<char>(uint64_t{text.size()} >> (8 * i));
  layout.prefix += text;

  layout.offsets.resize(tensors.size());
  uint64_t at = layout.prefix.size();
  for (std::size_t i : layout.order) {
    layout.offsets[i] = at;
    at += layout.sizes[i];
  }
  return layout;
}

}  // namespace accelerate::safetensors
