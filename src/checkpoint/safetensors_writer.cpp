// Writing safetensors files (see include/accelerate/checkpoint/safetensors.h).
//
// Throughput matters (save benchmarks compare with raw writes): tensor bytes
// go from tensor memory to write(2) with no per-element work; small tensors
// are gathered into one buffer so a model of many biases does not cost a
// system call each.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/common/errors.h"
#include "checkpoint/safetensors_dtype.h"
#include "checkpoint/safetensors_header.h"
#include "checkpoint/safetensors_io.h"
#include "checkpoint/safetensors_layout.h"
#include "checkpoint/safetensors_streaming.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors files are little-endian; this writer copies memory as is"
#endif

namespace accelerate {
namespace {

using safetensors::File;

// Collects small writes into one buffer; large ones go straight through.
class CoalescingWriter {
 public:
  explicit CoalescingWriter(File& file) : file_(file) { buffer_.reserve(kBuffer); }
  void write(const void* data, uint64_t size) {
    if (size >= kDirect) {
      flush();
      file_.write_all(data, size);
      return;
    }
    if (buffer_.size() + size > kBuffer) flush();
    const auto* bytes = static_cast<const char*>(data);
    buffer_.insert(buffer_.end(), bytes, bytes + size);
  }
  void flush() {
    file_.write_all(buffer_.data(), buffer_.size());
    buffer_.clear();
  }

 private:
  static constexpr uint64_t kDirect = uint64_t{1} << 20;
  static constexpr uint64_t kBuffer = uint64_t{4} << 20;
  File& file_;
  std::vector<char> buffer_;
};

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw Error("cannot write safetensors file '" + path + "': " + problem);
}

// The file's layout for `tensors` (their own dtypes and shapes), after the
// checks only LibTorch can make.
safetensors::FileLayout plan(const std::string& path, const NamedTensors& tensors,
                             const SafetensorsMetadata& metadata) {
  std::vector<safetensors::TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    const std::string shown = safetensors::printable(name);
    if (!tensor.defined()) fail(path, "tensor '" + shown + "' is undefined");
    const char* dtype = safetensors::dtype_name(tensor.scalar_type());
    if (dtype == nullptr) {
      fail(path, "tensor '" + shown + "' has dtype " +
                     std::string(c10::toString(tensor.scalar_type())) +
                     ", which safetensors cannot store");
    }
    specs.push_back({name, dtype, tensor.sizes().vec()});
  }
  return safetensors::layout_file(path, specs, metadata);
}

std::string temporary_name(const std::string& path) {
  return path + ".tmp-" + std::to_string(::getpid());
}

void rename_into_place(const std::string& temporary, const std::string& path) {
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    fail(path, std::string("rename from temporary file failed: ") + std::strerror(errno));
  }
}

// The bytes of `tensor` as the file stores them (a CPU copy when it is not
// a contiguous CPU tensor).
at::Tensor file_bytes(const at::Tensor& tensor) {
  at::Tensor out = tensor.detach();
  if (!out.device().is_cpu()) out = out.to(at::kCPU);
  return out.contiguous();  // no copy when it already is
}

void write_file(File& file, const safetensors::FileLayout& layout, const NamedTensors& tensors) {
  CoalescingWriter out(file);
  out.write(layout.prefix.data(), layout.prefix.size());
  for (std::size_t i : layout.order) {
    if (layout.sizes[i] == 0) continue;
    out.write(file_bytes(tensors[i].second).data_ptr(), layout.sizes[i]);
  }
  out.flush();
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const SafetensorsMetadata& metadata) {
  const safetensors::FileLayout layout = plan(path, tensors, metadata);
  // A temporary name in the same directory, renamed into place at the end:
  // a crash or error never leaves a truncated file under `path`.
  const std::string temporary = temporary_name(path);
  try {
    File file = File::open_write(temporary);
    write_file(file, layout, tensors);
    file.close();
    rename_into_place(temporary, path);
  } catch (...) {
    std::remove(temporary.c_str());
    throw;
  }
}

namespace safetensors {

struct StreamedFile::Output {
  File file;
};

StreamedFile::StreamedFile(std::string path, const NamedTensors& layout,
                           const SafetensorsMetadata& metadata)
    : path_(std::move(path)), temporary_(temporary_name(path_)) {
  const FileLayout planned = plan(path_, layout, metadata);
  for (std::size_t i = 0; i < layout.size(); ++i) {
    places_[layout[i].first] =
        Place{planned.offsets[i], planned.sizes[i], layout[i].second.scalar_type(), false};
  }
  file_ = std::make_unique<Output>(Output{File::open_write(temporary_)});
  try {
    file_->file.write_all(planned.prefix.data(), planned.prefix.size());
  } catch (...) {  // no destructor runs for a throwing constructor
    file_.reset();
    std::remove(temporary_.c_str());
    throw;
  }
}

StreamedFile::~StreamedFile() {
  if (committed_) return;
  file_.reset();  // closes
  std::remove(temporary_.c_str());
}

void StreamedFile::write(const std::string& name, const at::Tensor& tensor) {
  auto it = places_.find(name);
  if (it == places_.end())
    fail(path_, "tensor '" + safetensors::printable(name) + "' was not declared");
  Place& place = it->second;
  if (static_cast<uint64_t>(tensor.numel()) * tensor.element_size() != place.nbytes ||
      tensor.scalar_type() != place.dtype) {
    fail(path_,
         "tensor '" + safetensors::printable(name) + "' has another size or dtype than declared");
  }
  if (place.nbytes > 0)
    file_->file.write_at(file_bytes(tensor).data_ptr(), place.nbytes, place.offset);
  place.written = true;
}

void StreamedFile::commit() {
  for (const auto& [name, place] : places_) {
    if (!place.written)
      fail(path_, "tensor '" + safetensors::printable(name) + "' was never written");
  }
  file_->file.close();
  rename_into_place(temporary_, path_);
  committed_ = true;
}

}  // namespace safetensors

}  // namespace accelerate
