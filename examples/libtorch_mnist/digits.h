// MNIST's IDX files as a LibTorch dataset, the way LibTorch programs define
// their own: a torch::data::datasets::Dataset subclass with get() and size().
// Images come as float [1, 28, 28] in [0, 1], labels as int64 scalars.
// (LibTorch's own torch::data::datasets::MNIST insists on all 60,000 training
// images; scripts/fetch-mnist.sh keeps a class-balanced subset.)
#pragma once

#include <cstdint>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace libtorch_mnist {

class Digits : public torch::data::datasets::Dataset<Digits> {
 public:
  Digits(const std::string& root, bool train) {
    const std::string prefix = root + (train ? "/train" : "/t10k");
    images_ =
        read_idx(prefix + "-images-idx3-ubyte", 2051).to(torch::kFloat).div_(255).unsqueeze(1);
    targets_ = read_idx(prefix + "-labels-idx1-ubyte", 2049).to(torch::kInt64);
    if (images_.size(0) != targets_.size(0)) {
      throw std::runtime_error(prefix + ": image and label counts differ");
    }
  }

  torch::data::Example<> get(size_t index) override {
    const auto i = static_cast<int64_t>(index);
    return {images_[i], targets_[i]};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(targets_.size(0)); }

 private:
  // An IDX file's contents as a uint8 tensor shaped by its header.
  static torch::Tensor read_idx(const std::string& path, int32_t magic) {
    std::ifstream file(path, std::ios::binary);
    if (!file) throw std::runtime_error("cannot open " + path);
    std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(file)),
                                     std::istreambuf_iterator<char>());
    auto word = [&](size_t at) {
      if (bytes.size() < at + 4) throw std::runtime_error(path + ": truncated header");
      return static_cast<int64_t>(bytes[at]) << 24 | static_cast<int64_t>(bytes[at + 1]) << 16 |
             static_cast<int64_t>(bytes[at + 2]) << 8 | static_cast<int64_t>(bytes[at + 3]);
    };
    if (word(0) != magic) throw std::runtime_error(path + ": not an IDX file of this kind");
    std::vector<int64_t> shape{word(4)};
    if (magic == 2051) shape.insert(shape.end(), {word(8), word(12)});
    const size_t header = 4 + 4 * shape.size();
    int64_t count = 1;
    for (int64_t extent : shape) count *= extent;
    if (bytes.size() != header + static_cast<size_t>(count)) {
      throw std::runtime_error(path + ": size does not match its header");
    }
    return torch::from_blob(bytes.data() + header, shape, torch::kUInt8).clone();
  }

  torch::Tensor images_, targets_;
};

}  // namespace libtorch_mnist
