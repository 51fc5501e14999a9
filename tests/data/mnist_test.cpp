// MnistDataset over small IDX files written by the test, good and bad.
#include "accelerate/data/mnist.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "accelerate/data/data_loader.h"

namespace accelerate {
namespace {

namespace fs = std::filesystem;

class MnistFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("accelerate-mnist-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(root_);
    // Five 3x2 images whose pixels count up; labels 0..4.
    pixels_ = torch::arange(5 * 3 * 2, torch::kByte).reshape({5, 3, 2}).mul(8);
    write_idx_images(path("train-images-idx3-ubyte"), pixels_);
    write_idx_labels(path("train-labels-idx1-ubyte"), torch::arange(5, torch::kByte));
    write_idx_images(path("t10k-images-idx3-ubyte"), pixels_.narrow(0, 0, 2));
    write_idx_labels(path("t10k-labels-idx1-ubyte"), torch::tensor({7, 9}, torch::kByte));
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string path(const std::string& name) const { return (root_ / name).string(); }

  void truncate(const std::string& name, size_t bytes) { fs::resize_file(path(name), bytes); }

  std::string error_for(MnistSplit split = MnistSplit::kTrain) const {
    try {
      MnistDataset dataset(root_.string(), split);
    } catch (const Error& error) {
      return error.what();
    }
    return "";
  }

  fs::path root_;
  torch::Tensor pixels_;
};

TEST_F(MnistFiles, ReadsImagesNormalisedLikeTorchvision) {
  MnistDataset train(root_.string(), MnistSplit::kTrain);
  ASSERT_EQ(train.size(), 5u);
  auto example = train.get(3);
  EXPECT_EQ(example.data.sizes(), (std::vector<int64_t>{1, 3, 2}));
  EXPECT_EQ(example.data.scalar_type(), torch::kFloat);
  EXPECT_EQ(example.target.scalar_type(), torch::kLong);
  EXPECT_EQ(example.target.item<int64_t>(), 3);
  auto expected = (pixels_[3].to(torch::kFloat) / 255.0 - 0.1307) / 0.3081;
  EXPECT_TRUE(torch::allclose(example.data[0], expected));
  EXPECT_THROW(train.get(5), Error);

  MnistDataset test(root_.string() + "/", MnistSplit::kTest);
  ASSERT_EQ(test.size(), 2u);
  EXPECT_EQ(test.get(1).target.item<int64_t>(), 9);
}

TEST_F(MnistFiles, FeedsADataLoader) {
  DataLoader loader(MnistDataset(root_.string()), DataLoaderOptions(2));
  std::vector<int64_t> batch_sizes;
  for (auto& batch : loader) {
    EXPECT_EQ(batch.data.dim(), 4);
    batch_sizes.push_back(batch.target.size(0));
  }
  EXPECT_EQ(batch_sizes, (std::vector<int64_t>{2, 2, 1}));
}

// LibTorch's own MNIST (a torch::data::datasets::Dataset) is a map-style
// dataset too. Its reader insists on all 60,000 images, so this only has to
// compile.
static_assert(is_map_style_dataset<torch::data::datasets::MNIST>, "");
[[maybe_unused]] size_t batches_of_torch_mnist(const std::string& root) {
  DataLoader loader(torch::data::datasets::MNIST(root), DataLoaderOptions(64).shuffle(true));
  static_assert(std::is_same<decltype(loader)::BatchType, Example>::value, "");
  size_t batches = 0;
  for (auto& batch : loader) batches += batch.data.defined() ? 1 : 0;
  return batches;
}

void expect_one_line_naming(const std::string& message, const std::string& file,
                            const std::string& problem) {
  EXPECT_NE(message.find(file), std::string::npos) << message;
  EXPECT_NE(message.find(problem), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST_F(MnistFiles, MissingFileIsNamed) {
  fs::remove(path("t10k-labels-idx1-ubyte"));
  expect_one_line_naming(error_for(MnistSplit::kTest), path("t10k-labels-idx1-ubyte"),
                         "cannot be opened");
}

TEST_F(MnistFiles, TruncatedFilesAreNamed) {
  truncate("train-images-idx3-ubyte", 16 + 5 * 6 - 1);
  expect_one_line_naming(error_for(), path("train-images-idx3-ubyte"), "truncated");
  truncate("train-images-idx3-ubyte", 7);  // inside the header
  expect_one_line_naming(error_for(), path("train-images-idx3-ubyte"), "truncated");
}

TEST_F(MnistFiles, WrongMagicIsNamed) {
  // Labels where images belong.
  fs::copy_file(path("train-labels-idx1-ubyte"), path("train-images-idx3-ubyte"),
                fs::copy_options::overwrite_existing);
  expect_one_line_naming(error_for(), path("train-images-idx3-ubyte"), "magic number 2049");
}

TEST_F(MnistFiles, TrailingBytesAndCountMismatchAreNamed) {
  write_idx_labels(path("train-labels-idx1-ubyte"), torch::arange(4, torch::kByte));
  expect_one_line_naming(error_for(), path("train-labels-idx1-ubyte"), "4 labels for 5 images");
  {
    std::ofstream append(path("train-labels-idx1-ubyte"), std::ios::binary | std::ios::app);
    append << "xx";
  }
  expect_one_line_naming(error_for(), path("train-labels-idx1-ubyte"), "2 bytes after");
}

}  // namespace
}  // namespace accelerate
