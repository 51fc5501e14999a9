// Reading safetensors files (see include/accelerate/checkpoint/safetensors.h). The
// header is fully validated first (checkpoint/safetensors_header.cpp), so
// here every tensor's bytes are known to lie inside the file and to match
// its shape; allocation is bounded by the file's size.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <sstream>

#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/common/errors.h"
#include "checkpoint/safetensors_dtype.h"
#include "checkpoint/safetensors_header.h"
#include "checkpoint/safetensors_io.h"

namespace accelerate {
namespace {

std::string shape_text(c10::IntArrayRef shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

}  // namespace

struct SafetensorsReader::Impl {
  explicit Impl(const std::string& path)
      : file(safetensors::File::open_read(path)), header(safetensors::read_header(file)) {
    for (size_t i = 0; i < header.tensors.size(); ++i) index.emplace(header.tensors[i].name, i);
  }

  [[noreturn]] void fail(const std::string& name, const std::string& problem) const {
    throw Error("safetensors file '" + file.path() + "': tensor '" + safetensors::printable(name) +
                "': " + problem);
  }

  const safetensors::TensorEntry& entry(const std::string& name) const {
    const auto found = index.find(name);
    if (found == index.end()) fail(name, "not in the file");
    return header.tensors[found->second];
  }

  at::ScalarType type_of(const safetensors::TensorEntry& e) const {
    const auto type = safetensors::scalar_type(e.dtype);
    if (!type) fail(e.name, "dtype " + e.dtype + " has no LibTorch equivalent");
    return *type;
  }

  // Reads the bytes of `e` into `destination`, contiguous CPU memory of the
  // right size. BOOL bytes other than 0/1 are refused: LibTorch assumes them.
  void read_bytes(const safetensors::TensorEntry& e, void* destination) const {
    const uint64_t size = e.end - e.begin;
    file.read_at(destination, size, header.data_offset + e.begin);
    if (e.dtype == "BOOL") {
      const auto* bytes = static_cast<const unsigned char*>(destination);
      if (std::any_of(bytes, bytes + size, [](unsigned char b) { return b > 1; })) {
        fail(e.name, "BOOL data holds bytes other than 0 and 1");
      }
    }
  }

  safetensors::File file;
  safetensors::Header header;
  std::map<std::string, size_t> index;
};

SafetensorsReader::SafetensorsReader(const std::string& path)
    : impl_(std::make_unique<Impl>(path)) {}
SafetensorsReader::~SafetensorsReader() = default;
SafetensorsReader::SafetensorsReader(SafetensorsReader&&) noexcept = default;
SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&&) noexcept = default;

const std::string& SafetensorsReader::path() const { return impl_->file.path(); }

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> names;
  names.reserve(impl_->header.tensors.size());
  for (const auto& e : impl_->header.tensors) names.push_back(e.name);
  return names;
}

bool SafetensorsReader::contains(const std::string& name) const {
  return impl_->index.count(name) > 0;
}

const SafetensorsMetadata& SafetensorsReader::metadata() const { return impl_->header.metadata; }

at::ScalarType SafetensorsReader::dtype(const std::string& name) const {
  return impl_->type_of(impl_->entry(name));
}

std::vector<int64_t> SafetensorsReader::shape(const std::string& name) const {
  return impl_->entry(name).shape;
}

at::Tensor SafetensorsReader::read(const std::string& name) const {
  const auto& e = impl_->entry(name);
  at::Tensor tensor = at::empty(e.shape, at::TensorOptions().dtype(impl_->type_of(e)));
  impl_->read_bytes(e, tensor.data_ptr());
  return tensor;
}

std::string SafetensorsReader::mismatch(const std::string& name,
                                        const at::Tensor& destination) const {
  try {
    const auto& e = impl_->entry(name);
    const at::ScalarType type = impl_->type_of(e);
    if (!destination.defined()) impl_->fail(name, "the destination tensor is undefined");
    if (type != destination.scalar_type() || c10::IntArrayRef(e.shape) != destination.sizes()) {
      impl_->fail(name, "is " + e.dtype + " " + shape_text(e.shape) +
                            " in the file but the destination is " +
                            std::string(safetensors::dtype_name(destination.scalar_type())
                                            ? safetensors::dtype_name(destination.scalar_type())
                                            : c10::toString(destination.scalar_type())) +
                            " " + shape_text(destination.sizes()));
    }
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void SafetensorsReader::read_into(const std::string& name, const at::Tensor& destination) const {
  const std::string problem = mismatch(name, destination);
  if (!problem.empty()) throw Error(problem);
  const auto& e = impl_->entry(name);
  at::NoGradGuard no_grad;
  if (destination.device().is_cpu() && destination.is_contiguous() && e.dtype != "BOOL") {
    // Straight from the file into the parameter, no staging copy. Bump the
    // version as copy_ would, so autograd notices a changed saved tensor.
    impl_->read_bytes(e, destination.data_ptr());
    destination.unsafeGetTensorImpl()->bump_version();
    return;
  }
  destination.copy_(read(name));
}

NamedTensors load_safetensors(const std::string& path, SafetensorsMetadata* metadata) {
  const SafetensorsReader reader(path);
  NamedTensors tensors;
  for (auto& name : reader.names()) {
    at::Tensor tensor = reader.read(name);
    tensors.emplace_back(std::move(name), std::move(tensor));
  }
  if (metadata != nullptr) *metadata = reader.metadata();
  return tensors;
}

}  // namespace accelerate
