// DataLoader over LibTorch's dataset family as LibTorch programs build it:
// .map(...) pipelines and BatchDataset subclasses, stateful datasets, and
// make_data_loader with LibTorch's arguments, checked against LibTorch's own
// loader over the same datasets.
#include "accelerate/data/make_data_loader.h"

#include <chrono>
#include <set>
#include <type_traits>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "accelerate/accelerator/accelerator.h"
#include "data/torch_test_datasets.h"

namespace accelerate {
namespace {

using testing::DatasetProbe;
using testing::index_pipeline;
using testing::IndexBatches;
using testing::IndexPipeline;
using testing::IndexStatefulStream;
using testing::TorchIndexDataset;
using Batches = std::vector<std::vector<int64_t>>;
using torch::data::samplers::RandomSampler;
using torch::data::samplers::SequentialSampler;
namespace transforms = torch::data::transforms;

using NormalizedIndices =
    torch::data::datasets::MapDataset<TorchIndexDataset, transforms::Normalize<>>;
using StackedStream = torch::data::datasets::MapDataset<IndexStatefulStream, transforms::Stack<>>;

static_assert(dataset_kind<torch::data::datasets::MNIST> == DatasetKind::kMapStyle, "");
static_assert(dataset_kind<TorchIndexDataset> == DatasetKind::kMapStyle, "");
static_assert(dataset_kind<NormalizedIndices> == DatasetKind::kBatch, "");
static_assert(dataset_kind<IndexPipeline> == DatasetKind::kBatch, "");
static_assert(dataset_kind<IndexBatches> == DatasetKind::kBatch, "");
static_assert(dataset_kind<IndexStatefulStream> == DatasetKind::kStateful, "");
static_assert(dataset_kind<StackedStream> == DatasetKind::kStateful, "");
static_assert(dataset_kind<testing::IndexStream<>> == DatasetKind::kIterable, "");
static_assert(dataset_kind<int> == DatasetKind::kUnsupported, "");
// Batch types: what the dataset's get_batch gives, as in LibTorch's loader.
static_assert(std::is_same<DataLoader<IndexPipeline>::BatchType, Example>::value, "");
static_assert(std::is_same<DataLoader<NormalizedIndices>::BatchType, std::vector<Example>>::value,
              "");

// The data a batch of the normalized index pipeline must hold (Normalize
// broadcasts through a [1, 1, 1] mean, so examples come as [1, 1, 2]).
at::Tensor normalized(const std::vector<int64_t>& indices) {
  auto values = torch::tensor(indices, torch::kFloat).unsqueeze(1).expand({-1, 2});
  return (values - 0.5) / 2.0;
}

// LibTorch's own loader over `dataset`, sequentially: the reference order.
template <class Dataset>
Batches torch_loader_batches(Dataset dataset, size_t batch_size, bool drop_last = false) {
  auto loader = torch::data::make_data_loader<SequentialSampler>(
      std::move(dataset),
      torch::data::DataLoaderOptions().batch_size(batch_size).drop_last(drop_last));
  Batches batches;
  for (auto& batch : *loader) batches.push_back(testing::targets_of(batch));
  return batches;
}

TEST(TorchPipeline, MapChainWithStackYieldsTheTransformedBatches) {
  DataLoader loader(index_pipeline(10), DataLoaderOptions(4));
  EXPECT_EQ(loader.size(), 3u);
  Batches batches;
  std::vector<bool> ends;
  for (Example& batch : loader) {
    const auto targets = testing::targets_of(batch);
    EXPECT_TRUE(torch::equal(batch.data.reshape({-1, 2}), normalized(targets))) << batch.data;
    batches.push_back(targets);
    ends.push_back(loader.end_of_dataloader());
  }
  EXPECT_EQ(batches, (Batches{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  EXPECT_EQ(ends, (std::vector<bool>{false, false, true}));
  EXPECT_EQ(batches, torch_loader_batches(index_pipeline(10), 4));
}

TEST(TorchPipeline, MapChainWithoutStackYieldsVectorsOfExamples) {
  DataLoader loader(TorchIndexDataset(7).map(transforms::Normalize<>(0.5, 2.0)),
                    DataLoaderOptions(3).drop_last(true));
  Batches batches;
  for (std::vector<Example>& batch : loader) {
    ASSERT_EQ(batch.size(), 3u);
    EXPECT_TRUE(
        torch::equal(batch[1].data.reshape({2}), normalized({batch[1].target.item<int64_t>()})[0]));
    batches.push_back(testing::targets_of(batch));
  }
  EXPECT_EQ(batches, (Batches{{0, 1, 2}, {3, 4, 5}}));
}

TEST(TorchPipeline, UserBatchDatasetSubclassIsReadByIndices) {
  DataLoader loader(IndexBatches(5), DataLoaderOptions(2).shuffle(true).seed(3));
  std::multiset<int64_t> seen;
  for (auto& batch : loader) {
    for (int64_t target : testing::targets_of(batch)) seen.insert(target);
  }
  EXPECT_EQ(seen, (std::multiset<int64_t>{0, 1, 2, 3, 4}));
}

TEST(TorchPipeline, WorkersKeepTheOrderAndSkipResumes) {
  DataLoader loader(index_pipeline(23), DataLoaderOptions(5).num_workers(3));
  const Batches all = testing::one_pass(loader);
  EXPECT_EQ(all, torch_loader_batches(index_pipeline(23), 5));
  loader.skip_first_batches(2);
  const Batches rest = testing::one_pass(loader);
  EXPECT_EQ(rest, Batches(all.begin() + 2, all.end()));
  EXPECT_EQ(loader.position().epoch, 2);
}

TEST(TorchPipeline, PositionRestoredInANewLoaderContinuesTheShuffledEpoch) {
  // What save_state/load_state carry for a loader: (epoch, batches, seed).
  DataLoader first(index_pipeline(20), DataLoaderOptions(4).shuffle(true).seed(9));
  first.set_epoch(1);
  Batches seen;
  for (auto& batch : first) {
    seen.push_back(testing::targets_of(batch));
    if (seen.size() == 2) break;
  }
  const DataLoaderPosition saved = first.position();
  EXPECT_EQ(saved.batches_yielded, 2u);
  DataLoader full(index_pipeline(20), DataLoaderOptions(4).shuffle(true).seed(9));
  full.set_epoch(1);
  const Batches whole = testing::one_pass(full);
  DataLoader resumed(index_pipeline(20), DataLoaderOptions(4).shuffle(true).seed(1));
  resumed.restore_position(saved);
  EXPECT_EQ(testing::one_pass(resumed), Batches(whole.begin() + 2, whole.end()));
  EXPECT_EQ(Batches(whole.begin(), whole.begin() + 2), seen);
}

TEST(TorchPipeline, StatefulDatasetIsReadInItsOwnBatchSize) {
  auto probe = std::make_shared<DatasetProbe>();
  DataLoader loader(IndexStatefulStream(10, probe), DataLoaderOptions(4));
  EXPECT_EQ(testing::one_pass(loader), (Batches{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  EXPECT_EQ(loader.dataset().last_request(), 4u) << "a ChunkDataset takes no other count";
  EXPECT_EQ(testing::one_pass(loader), (Batches{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  EXPECT_EQ(probe->resets.load(), 2u) << "reset() before every epoch";
}

TEST(TorchPipeline, StackedStatefulBatchesAreSplitIntoRows) {
  DataLoader loader(IndexStatefulStream(7).map(transforms::Stack<>()), DataLoaderOptions(3));
  static_assert(std::is_same<decltype(loader)::BatchType, Example>::value, "");
  EXPECT_EQ(testing::one_pass(loader), (Batches{{0, 1, 2}, {3, 4, 5}, {6}}));
}

TEST(TorchPipeline, ChunkDatasetBehindMakeSharedDatasetIsAStream) {
  auto chunks = testing::index_chunk_dataset(/*chunks=*/3, /*per_chunk=*/4, /*batch_size=*/5);
  static_assert(dataset_kind<decltype(chunks)> == DatasetKind::kStateful, "");
  DataLoader loader(chunks, DataLoaderOptions(5));
  for (int epoch = 0; epoch < 2; ++epoch) {
    EXPECT_EQ(testing::one_pass(loader), (Batches{{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}, {10, 11}}))
        << "epoch " << epoch;
  }
}

TEST(MakeDataLoader, TakesLibTorchsArgumentsAndYieldsLibTorchsBatches) {
  auto loader = accelerate::make_data_loader<SequentialSampler>(
      index_pipeline(11),
      torch::data::DataLoaderOptions().batch_size(4).workers(2).max_jobs(5).drop_last(true));
  static_assert(std::is_same<std::decay_t<decltype(*loader->begin())>, Example>::value, "");
  const DataLoaderOptions& options = loader->options();
  EXPECT_EQ(options.batch_size(), 4u);
  EXPECT_EQ(options.num_workers(), 2u);
  EXPECT_EQ(options.prefetch_factor(), 3u) << "ceil(max_jobs 5 / 2 workers)";
  EXPECT_TRUE(options.drop_last());
  EXPECT_FALSE(options.shuffle());
  Batches batches;
  for (auto& batch : *loader) batches.push_back(testing::targets_of(batch));
  EXPECT_EQ(batches, torch_loader_batches(index_pipeline(11), 4, /*drop_last=*/true));
  EXPECT_EQ(batches, (Batches{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

TEST(MakeDataLoader, MapStyleDatasetYieldsVectorsAsLibTorchDoes) {
  auto loader = accelerate::make_data_loader<SequentialSampler>(
      TorchIndexDataset(5), torch::data::DataLoaderOptions().batch_size(2));
  static_assert(std::is_same<std::decay_t<decltype(*loader->begin())>, std::vector<Example>>::value,
                "");
  Batches batches;
  for (std::vector<Example>& batch : *loader) batches.push_back(testing::targets_of(batch));
  EXPECT_EQ(batches, torch_loader_batches(TorchIndexDataset(5), 2));
}

TEST(MakeDataLoader, RandomSamplerShufflesEveryEpochAnew) {
  auto loader = accelerate::make_data_loader(index_pipeline(40),
                                             torch::data::DataLoaderOptions().batch_size(8));
  EXPECT_TRUE(loader->options().shuffle()) << "RandomSampler is the default, as in LibTorch";
  std::vector<Batches> epochs;
  for (int epoch = 0; epoch < 2; ++epoch) {
    epochs.push_back(testing::one_pass(*loader));
    std::set<int64_t> seen;
    for (const auto& batch : epochs.back()) seen.insert(batch.begin(), batch.end());
    EXPECT_EQ(seen.size(), 40u);
  }
  EXPECT_NE(epochs[0], epochs[1]);
}

TEST(MakeDataLoader, StatefulDatasetsKeepTheirBatchType) {
  auto vectors = accelerate::make_data_loader(IndexStatefulStream(5),
                                              torch::data::DataLoaderOptions().batch_size(2));
  static_assert(
      std::is_same<std::decay_t<decltype(*vectors->begin())>, std::vector<Example>>::value, "");
  Batches batches;
  for (auto& batch : *vectors) batches.push_back(testing::targets_of(batch));
  EXPECT_EQ(batches, (Batches{{0, 1}, {2, 3}, {4}}));
  EXPECT_FALSE(vectors->options().shuffle()) << "a stream takes no sampler";

  auto stacked = accelerate::make_data_loader(IndexStatefulStream(5).map(transforms::Stack<>()),
                                              torch::data::DataLoaderOptions().batch_size(2));
  static_assert(std::is_same<std::decay_t<decltype(*stacked->begin())>, Example>::value, "");
  EXPECT_EQ(testing::one_pass(*stacked), batches);
  // LibTorch's own loader over the same stream gives the same batches.
  auto reference = torch::data::make_data_loader(IndexStatefulStream(5).map(transforms::Stack<>()),
                                                 torch::data::DataLoaderOptions().batch_size(2));
  Batches expected;
  for (auto& batch : *reference) expected.push_back(testing::targets_of(batch));
  EXPECT_EQ(expected, batches);
}

TEST(MakeDataLoader, TimeoutStopsAWaitForSlowWorkers) {
  auto probe = std::make_shared<DatasetProbe>();
  probe->pause = std::chrono::milliseconds(400);
  auto loader = accelerate::make_data_loader<SequentialSampler>(
      TorchIndexDataset(4, probe).map(transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(2).workers(1).timeout(
          std::chrono::milliseconds(50)));
  EXPECT_EQ(loader->options().timeout(), std::chrono::milliseconds(50));
  ::testing::internal::CaptureStderr();
  try {
    for (auto& batch : *loader) (void)batch;
    FAIL() << "expected a timeout";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("within the timeout of 50 ms"), std::string::npos)
        << error.what();
  }
  // Printed at the timeout too: the exception waits for the stuck call.
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(printed.find("accelerate: error: DataLoader: no batch from the workers"),
            std::string::npos)
      << printed;
}

TEST(MakeDataLoader, SlowConsumerDoesNotTimeOut) {
  // The timeout is about waiting for workers, not about the loop's own pace.
  auto loader = accelerate::make_data_loader<SequentialSampler>(
      index_pipeline(6), torch::data::DataLoaderOptions().batch_size(2).workers(2).timeout(
                             std::chrono::milliseconds(50)));
  size_t batches = 0;
  for (auto& batch : *loader) {
    (void)batch;
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
    ++batches;
  }
  EXPECT_EQ(batches, 3u);
}

TEST(MakeDataLoader, AcceleratorPreparesTheReturnedPointer) {
  Accelerator accelerator(AcceleratorOptions().environment(Environment{}).tune_malloc(false));
  auto loader = accelerate::make_data_loader<SequentialSampler>(
      index_pipeline(6), torch::data::DataLoaderOptions().batch_size(4));
  accelerator.prepare(loader);
  std::vector<bool> ends;
  for (auto& batch : *loader) {
    (void)batch;
    ends.push_back(accelerator.gradient_state()->end_of_dataloader());
  }
  EXPECT_EQ(ends, (std::vector<bool>{false, true})) << "the prepared loader reports its last batch";
}

}  // namespace
}  // namespace accelerate
