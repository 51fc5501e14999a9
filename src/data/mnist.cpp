#include "accelerate/data/mnist.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include <ATen/ATen.h>

#include "accelerate/common/errors.h"

namespace accelerate {
namespace {

// Magic numbers of the IDX format: 0x0000 0x08 (unsigned bytes) then the
// number of dimensions.
constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw Error("MNIST file " + path + ": " + problem);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot be opened (missing? download MNIST into this folder)");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail(path, "read error");
  return bytes;
}

uint32_t big_endian_at(const std::string& bytes, size_t offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data() + offset);
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// The dimensions of an IDX file after checking its magic number and that its
// size matches them exactly; the data follows the header.
std::vector<int64_t> idx_dimensions(const std::string& path, const std::string& bytes,
                                    uint32_t magic, const char* kind) {
  const size_t rank = magic & 0xff;
  const size_t header = 4 + 4 * rank;
  const uint32_t found = bytes.size() >= 4 ? big_endian_at(bytes, 0) : magic;
  if (found != magic) {
    fail(path, "not an IDX " + std::string(kind) + " file: magic number " + std::to_string(found) +
                   ", expected " + std::to_string(magic));
  }
  if (bytes.size() < header) {
    fail(path, "truncated: " + std::to_string(bytes.size()) + " bytes, shorter than the " +
                   std::to_string(header) + "-byte header of an IDX " + kind + " file");
  }
  std::vector<int64_t> dims;
  size_t expected = header;
  size_t items = 1;
  for (size_t d = 0; d < rank; ++d) {
    dims.push_back(big_endian_at(bytes, 4 + 4 * d));
    const auto size = static_cast<size_t>(dims.back());
    // A corrupt header can announce more than memory holds; stop before
    // the product overflows.
    if (size != 0 && items > bytes.size() / size) {
      fail(path, "truncated: " + std::to_string(bytes.size()) +
                     " bytes, far fewer than the header announces");
    }
    items *= size;
  }
  expected += items;
  if (bytes.size() < expected) {
    fail(path, "truncated: " + std::to_string(bytes.size()) + " bytes, the header announces " +
                   std::to_string(expected));
  }
  if (bytes.size() > expected) {
    fail(path, std::to_string(bytes.size() - expected) + " bytes after the announced data");
  }
  return dims;
}

at::Tensor bytes_tensor(const std::string& bytes, size_t offset, at::IntArrayRef sizes) {
  at::Tensor tensor = at::empty(sizes, at::kByte);
  std::memcpy(tensor.data_ptr(), bytes.data() + offset, static_cast<size_t>(tensor.numel()));
  return tensor;
}

void write_idx(const std::string& path, uint32_t magic, const at::Tensor& values) {
  if (values.scalar_type() != at::kByte || values.dim() != static_cast<int64_t>(magic & 0xff)) {
    throw Error("IDX " + path + ": expected a uint8 tensor with " + std::to_string(magic & 0xff) +
                " dimensions");
  }
  std::string bytes;
  auto put = [&](uint32_t word) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<char>(word >> shift));
  };
  put(magic);
  for (auto size : values.sizes()) put(static_cast<uint32_t>(size));
  at::Tensor data = values.contiguous().cpu();
  bytes.append(static_cast<const char*>(data.data_ptr()), static_cast<size_t>(data.numel()));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw Error("IDX " + path + ": cannot write the file");
}

}  // namespace

std::string MnistDataset::images_file_name(MnistSplit split) {
  return split == MnistSplit::kTrain ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte";
}

std::string MnistDataset::labels_file_name(MnistSplit split) {
  return split == MnistSplit::kTrain ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte";
}

MnistDataset::MnistDataset(const std::string& root, MnistSplit split) {
  const std::string folder = root.empty() || root.back() == '/' ? root : root + "/";
  const std::string images_path = folder + images_file_name(split);
  const std::string labels_path = folder + labels_file_name(split);

  const std::string image_bytes = read_file(images_path);
  const auto image_dims = idx_dimensions(images_path, image_bytes, kImagesMagic, "images");
  const std::string label_bytes = read_file(labels_path);
  const auto label_dims = idx_dimensions(labels_path, label_bytes, kLabelsMagic, "labels");
  if (image_dims[0] != label_dims[0]) {
    fail(labels_path, std::to_string(label_dims[0]) + " labels for " +
                          std::to_string(image_dims[0]) + " images in " + images_path);
  }

  at::Tensor pixels = bytes_tensor(image_bytes, 16, image_dims);
  images_ =
      pixels.to(at::kFloat).div_(255.0).sub_(kMnistMean).div_(kMnistStd).unsqueeze(1);  // one
                                                                                        // channel
  targets_ = bytes_tensor(label_bytes, 8, label_dims).to(at::kLong);
}

Example MnistDataset::get(size_t index) const {
  if (index >= size()) {
    throw Error("MnistDataset: index " + std::to_string(index) + " is out of range for " +
                std::to_string(size()) + " examples");
  }
  const auto i = static_cast<int64_t>(index);
  return {images_[i], targets_[i]};
}

void write_idx_images(const std::string& path, const at::Tensor& images) {
  write_idx(path, kImagesMagic, images);
}

void write_idx_labels(const std::string& path, const at::Tensor& labels) {
  write_idx(path, kLabelsMagic, labels);
}

}  // namespace accelerate
