// LibTorch-style datasets for the DataLoader tests, built the way LibTorch
// programs build theirs; like test_datasets.h, example i carries i as its
// target (and data [i, i]).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include "data/test_datasets.h"

namespace accelerate {
namespace testing {

// A torch::data::datasets::Dataset subclass (map-style: get and size) over
// IndexDataset.
class TorchIndexDataset : public torch::data::datasets::Dataset<TorchIndexDataset, Example> {
 public:
  explicit TorchIndexDataset(size_t length, std::shared_ptr<DatasetProbe> probe = nullptr)
      : indices_(length, std::move(probe)) {}
  Example get(size_t index) override { return indices_.get(index); }
  torch::optional<size_t> size() const override { return indices_.size(); }

 private:
  IndexDataset indices_;
};

// The pipeline LibTorch's MNIST example builds, over TorchIndexDataset:
// example-level Normalize (data -> (i - 0.5) / 2), then Stack<> into one
// Example per batch.
inline auto index_pipeline(size_t length, std::shared_ptr<DatasetProbe> probe = nullptr) {
  return TorchIndexDataset(length, std::move(probe))
      .map(torch::data::transforms::Normalize<>(0.5, 2.0))
      .map(torch::data::transforms::Stack<>());
}
using IndexPipeline = decltype(index_pipeline(0));

// A user's own BatchDataset subclass: get_batch(indices) and size() only.
class IndexBatches
    : public torch::data::datasets::BatchDataset<IndexBatches, std::vector<Example>> {
 public:
  explicit IndexBatches(size_t length) : length_(length) {}
  std::vector<Example> get_batch(c10::ArrayRef<size_t> indices) override {
    std::vector<Example> batch;
    for (size_t index : indices) batch.push_back(index_example(index));
    return batch;
  }
  torch::optional<size_t> size() const override { return length_; }

 private:
  size_t length_;
};

// A StatefulDataset over IndexStream: the stream 0..length-1 read `count`
// examples at a time.
class IndexStatefulStream
    : public torch::data::datasets::StatefulDataset<IndexStatefulStream, std::vector<Example>> {
 public:
  explicit IndexStatefulStream(size_t length, std::shared_ptr<DatasetProbe> probe = nullptr)
      : stream_(length, std::move(probe)), length_(length) {}
  torch::optional<std::vector<Example>> get_batch(size_t count) override {
    last_request_ = count;
    std::vector<Example> batch;
    while (batch.size() < count) {
      auto example = stream_.next();
      if (!example) break;
      batch.push_back(std::move(*example));
    }
    if (batch.empty()) return torch::nullopt;
    return batch;
  }
  void reset() override { stream_.reset(); }
  torch::optional<size_t> size() const override { return length_; }
  void save(torch::serialize::OutputArchive&) const override {}
  void load(torch::serialize::InputArchive&) override {}
  size_t last_request() const { return last_request_; }

 private:
  IndexStream<> stream_;
  size_t length_;
  size_t last_request_ = 0;
};

// A ChunkDataReader: `chunks` chunks of `per_chunk` examples, in order.
class IndexChunks : public torch::data::datasets::ChunkDataReader<Example> {
 public:
  using BatchType = ChunkType;  // ChunkDataset asks its reader for this name
  IndexChunks(size_t chunks, size_t per_chunk) : chunks_(chunks), per_chunk_(per_chunk) {}
  std::vector<Example> read_chunk(size_t chunk) override {
    std::vector<Example> examples;
    for (size_t i = 0; i < per_chunk_; ++i)
      examples.push_back(index_example(chunk * per_chunk_ + i));
    return examples;
  }
  size_t chunk_count() override { return chunks_; }
  void reset() override {}

 private:
  size_t chunks_;
  size_t per_chunk_;
};

using SequentialChunkDataset =
    torch::data::datasets::ChunkDataset<IndexChunks, torch::data::samplers::SequentialSampler,
                                        torch::data::samplers::SequentialSampler>;

// A ChunkDataset as LibTorch programs hold one (it cannot be moved):
// behind make_shared_dataset, read in batches of `batch_size`.
inline auto index_chunk_dataset(size_t chunks, size_t per_chunk, size_t batch_size) {
  return torch::data::datasets::make_shared_dataset<SequentialChunkDataset>(
      IndexChunks(chunks, per_chunk), torch::data::samplers::SequentialSampler(0),
      torch::data::samplers::SequentialSampler(0),
      torch::data::datasets::ChunkDatasetOptions(/*preloader_count=*/1, batch_size));
}

}  // namespace testing
}  // namespace accelerate
