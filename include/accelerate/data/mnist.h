// MNIST in its standard IDX files, as torchvision reads it:
//   <root>/train-images-idx3-ubyte, <root>/train-labels-idx1-ubyte   (kTrain)
//   <root>/t10k-images-idx3-ubyte,  <root>/t10k-labels-idx1-ubyte    (kTest)
// Example i is (image, label): the image a float tensor [1, rows, cols]
// (28x28 for real MNIST) normalised like torchvision's usual transform,
// (pixel / 255 - 0.1307) / 0.3081; the label an int64 scalar.
//
// A missing, truncated or malformed file (wrong magic number, sizes that do
// not match, image and label counts that differ) is a one-line
// accelerate::Error naming the file.
#pragma once

#include <cstddef>
#include <string>

#include <ATen/core/Tensor.h>

#include "accelerate/data/dataset.h"

namespace accelerate {

enum class MnistSplit { kTrain, kTest };

constexpr double kMnistMean = 0.1307;
constexpr double kMnistStd = 0.3081;

class MnistDataset {
 public:
  explicit MnistDataset(const std::string& root, MnistSplit split = MnistSplit::kTrain);

  size_t size() const { return static_cast<size_t>(targets_.size(0)); }
  Example get(size_t index) const;

  // Every image, [N, 1, rows, cols] float32, normalised.
  const at::Tensor& images() const { return images_; }
  // Every label, [N] int64.
  const at::Tensor& targets() const { return targets_; }

  static std::string images_file_name(MnistSplit split);
  static std::string labels_file_name(MnistSplit split);

 private:
  at::Tensor images_;
  at::Tensor targets_;
};

// Writers of the IDX format, for turning other sources of digits into the
// files MnistDataset (and torchvision) read, and for tests.
// images: uint8 [N, rows, cols]; labels: uint8 [N].
void write_idx_images(const std::string& path, const at::Tensor& images);
void write_idx_labels(const std::string& path, const at::Tensor& labels);

}  // namespace accelerate
