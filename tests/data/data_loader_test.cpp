// DataLoader in one process: batching, collate, shuffling and seeds, epochs,
// workers, errors, early exits, skipping, positions and observers.
#include "accelerate/data/data_loader.h"

#include <chrono>
#include <set>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "data/test_datasets.h"

namespace accelerate {
namespace {

using testing::DatasetProbe;
using testing::IndexDataset;
using testing::one_pass;
using Batches = std::vector<std::vector<int64_t>>;

TEST(DataLoader, BatchesInOrderWithAShortLastBatch) {
  DataLoader loader(IndexDataset(10), DataLoaderOptions(4));
  EXPECT_EQ(loader.size(), 3u);
  std::vector<bool> ends;
  Batches batches;
  for (auto& batch : loader) {
    EXPECT_EQ(batch.data.sizes(), (std::vector<int64_t>{batch.target.size(0), 2}));
    batches.push_back(testing::targets_of(batch));
    ends.push_back(loader.end_of_dataloader());
  }
  EXPECT_EQ(batches, (Batches{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  EXPECT_EQ(ends, (std::vector<bool>{false, false, true}));
  EXPECT_EQ(loader.remainder(), 0);  // one process: nothing padded
}

TEST(DataLoader, ReadsLikeTheDesignSketch) {
  // Built in place (loaders do not move: prepare() and running passes point
  // at them), with the batch type deduced from the dataset.
  auto loader = accelerate::DataLoader(TensorDataset(torch::ones({5, 3}), torch::zeros({5})),
                                       accelerate::DataLoaderOptions(2).shuffle(true));
  static_assert(std::is_same<decltype(loader)::BatchType, Example>::value, "");
  static_assert(!std::is_move_constructible<decltype(loader)>::value, "");
  size_t rows = 0;
  for (auto& batch : loader) rows += batch.data.size(0);
  EXPECT_EQ(rows, 5u);
}

TEST(DataLoader, DropLastDropsTheShortBatch) {
  DataLoader loader(IndexDataset(10), DataLoaderOptions(4).drop_last(true));
  EXPECT_EQ(loader.size(), 2u);
  EXPECT_EQ(one_pass(loader), (Batches{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

TEST(DataLoader, TakesACustomCollate) {
  auto collate = [](std::vector<Example> examples) {
    std::vector<int64_t> indices;
    for (auto& example : examples) indices.push_back(example.target.item<int64_t>());
    return indices;
  };
  DataLoader loader(IndexDataset(5), DataLoaderOptions(2), collate);
  static_assert(std::is_same<decltype(loader)::BatchType, std::vector<int64_t>>::value, "");
  std::vector<std::vector<int64_t>> batches;
  for (auto& batch : loader) batches.push_back(batch);
  EXPECT_EQ(batches, (Batches{{0, 1}, {2, 3}, {4}}));
}

struct TensorOnly {
  size_t size() const { return 3; }
  at::Tensor get(size_t index) const { return torch::full({2}, static_cast<double>(index)); }
};

TEST(DataLoader, StacksPlainTensorExamples) {
  DataLoader loader(TensorOnly(), DataLoaderOptions(3));
  for (auto& batch : loader) {
    EXPECT_TRUE(batch.equal(torch::tensor({{0., 0.}, {1., 1.}, {2., 2.}}, torch::kFloat)));
  }
}

TEST(DataLoader, ReadsLibTorchDatasets) {
  auto data = torch::arange(6, torch::kFloat).reshape({6, 1});
  auto dataset = torch::data::datasets::TensorDataset(data);  // a torch Dataset subclass
  DataLoader loader(dataset, DataLoaderOptions(4));
  EXPECT_EQ(loader.size(), 2u);
  std::vector<int64_t> sizes;
  for (auto& batch : loader) sizes.push_back(batch.data.size(0));
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 2}));
}

Batches flatten_check_permutation(const Batches& batches, size_t length) {
  std::set<int64_t> seen;
  for (const auto& batch : batches) seen.insert(batch.begin(), batch.end());
  EXPECT_EQ(seen.size(), length);
  return batches;
}

TEST(DataLoader, ShuffleIsReproducibleFromSeedAndEpoch) {
  auto options = DataLoaderOptions(4).shuffle(true).seed(1234);
  DataLoader a(IndexDataset(20), options);
  DataLoader b(IndexDataset(20), options);
  const auto first = flatten_check_permutation(one_pass(a), 20);
  EXPECT_EQ(one_pass(b), first);
  EXPECT_NE(one_pass(a), first) << "a second pass is the next epoch: a new order";
  b.set_epoch(0);
  EXPECT_EQ(one_pass(b), first);  // set_epoch goes back to epoch 0's order

  DataLoader other_seed(IndexDataset(20), DataLoaderOptions(4).shuffle(true).seed(4321));
  EXPECT_NE(one_pass(other_seed), first);
}

TEST(DataLoader, EpochsAdvanceAfterCompletePasses) {
  DataLoader loader(IndexDataset(8), DataLoaderOptions(4).shuffle(true).seed(5));
  EXPECT_EQ(loader.epoch(), 0);
  const auto epoch0 = one_pass(loader);
  EXPECT_EQ(loader.epoch(), 1);
  const auto epoch1 = one_pass(loader);
  EXPECT_EQ(loader.epoch(), 2);
  EXPECT_NE(epoch0, epoch1);
  loader.set_epoch(1);
  EXPECT_EQ(one_pass(loader), epoch1);
  // A pass left early does not advance the epoch.
  loader.set_epoch(0);
  for (auto& batch : loader) {
    (void)batch;
    break;
  }
  EXPECT_EQ(loader.epoch(), 0);
  EXPECT_EQ(one_pass(loader), epoch0);
}

TEST(DataLoader, DefaultSeedFollowsTorchManualSeed) {
  torch::manual_seed(77);
  DataLoader a(IndexDataset(16), DataLoaderOptions(4).shuffle(true));
  torch::manual_seed(77);
  DataLoader b(IndexDataset(16), DataLoaderOptions(4).shuffle(true));
  EXPECT_EQ(a.shuffle_seed(), b.shuffle_seed());
  EXPECT_EQ(one_pass(a), one_pass(b));
  torch::manual_seed(78);
  DataLoader c(IndexDataset(16), DataLoaderOptions(4).shuffle(true));
  EXPECT_NE(c.shuffle_seed(), a.shuffle_seed());
  c.set_shuffle_seed(a.shuffle_seed());
  a.set_epoch(0);
  EXPECT_EQ(one_pass(c), one_pass(a));
}

TEST(DataLoader, WorkersDeliverTheSameBatchesInTheSameOrder) {
  auto probe = std::make_shared<DatasetProbe>();
  probe->pause = std::chrono::microseconds(200);
  DataLoader serial(IndexDataset(50), DataLoaderOptions(3).shuffle(true).seed(9));
  const auto expected = one_pass(serial);
  for (size_t workers : {1, 2, 4}) {
    DataLoader parallel(IndexDataset(50, probe),
                        DataLoaderOptions(3).shuffle(true).seed(9).num_workers(workers));
    std::vector<bool> ends;
    Batches batches;
    for (auto& batch : parallel) {
      batches.push_back(testing::targets_of(batch));
      ends.push_back(parallel.end_of_dataloader());
    }
    EXPECT_EQ(batches, expected) << workers << " workers";
    EXPECT_EQ(ends.back(), true);
    EXPECT_EQ(std::count(ends.begin(), ends.end(), true), 1);
  }
}

TEST(DataLoader, AWorkersErrorReachesTheLoopAtItsBatch) {
  for (size_t workers : {0, 3}) {
    auto probe = std::make_shared<DatasetProbe>();
    probe->fail_at = 13;
    probe->fail_once = true;
    DataLoader loader(IndexDataset(30, probe), DataLoaderOptions(4).num_workers(workers));
    Batches seen;
    try {
      for (auto& batch : loader) seen.push_back(testing::targets_of(batch));
      FAIL() << "expected the dataset's error";
    } catch (const std::runtime_error& error) {
      EXPECT_STREQ(error.what(), "example 13 is broken");
    }
    EXPECT_EQ(seen, (Batches{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}})) << workers;
    EXPECT_FALSE(loader.is_iterating());
    EXPECT_EQ(loader.epoch(), 0);
    EXPECT_EQ(one_pass(loader).size(), 8u);  // the loader still works
  }
}

TEST(DataLoader, LeavingTheLoopEarlyStopsTheWorkers) {
  auto probe = std::make_shared<DatasetProbe>();
  probe->pause = std::chrono::milliseconds(5);
  DataLoader loader(IndexDataset(10000, probe), DataLoaderOptions(8).num_workers(4));
  const auto begin = std::chrono::steady_clock::now();
  for (auto& batch : loader) {
    (void)batch;
    break;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(5));
  EXPECT_EQ(probe->in_flight.load(), 0u);
  const size_t gets = probe->gets.load();
  EXPECT_LE(gets, 8u * (1 + 4 * 2 + 4));  // the first batch, the queue, the running ones
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(probe->gets.load(), gets);
  EXPECT_FALSE(loader.is_iterating());
}

TEST(DataLoader, DestroyingTheLoaderMidEpochStopsTheWorkers) {
  auto probe = std::make_shared<DatasetProbe>();
  probe->pause = std::chrono::milliseconds(2);
  {
    auto loader = std::make_unique<DataLoader<IndexDataset>>(IndexDataset(10000, probe),
                                                             DataLoaderOptions(8).num_workers(3));
    auto it = loader->begin();
    ++it;
    loader.reset();  // the iterator outlives its loader; it must not touch it
    EXPECT_TRUE(it == decltype(it)());
  }
  EXPECT_EQ(probe->in_flight.load(), 0u);
  const size_t gets = probe->gets.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(probe->gets.load(), gets);
}

TEST(DataLoader, ANewPassAbandonsTheOldOne) {
  DataLoader loader(IndexDataset(12), DataLoaderOptions(4).num_workers(2));
  auto first = loader.begin();
  EXPECT_EQ(testing::targets_of(*first), (std::vector<int64_t>{0, 1, 2, 3}));
  auto second = loader.begin();
  EXPECT_TRUE(first == loader.end());
  EXPECT_EQ(testing::targets_of(*second), (std::vector<int64_t>{0, 1, 2, 3}));
}

// Accelerate's tested case: 16 items in batches of 4, skipping 2.
TEST(DataLoader, SkipFirstBatchesResumesInsideTheEpoch) {
  for (int64_t epoch : {0, 3}) {
    DataLoader loader(IndexDataset(16), DataLoaderOptions(4));
    loader.set_epoch(epoch);
    loader.skip_first_batches(2);
    EXPECT_EQ(loader.position().batches_yielded, 2u);
    std::vector<bool> ends;
    Batches batches;
    for (auto& batch : loader) {
      batches.push_back(testing::targets_of(batch));
      ends.push_back(loader.end_of_dataloader());
      EXPECT_EQ(loader.position().batches_yielded, 2u + batches.size());
    }
    EXPECT_EQ(batches, (Batches{{8, 9, 10, 11}, {12, 13, 14, 15}}));
    EXPECT_EQ(ends, (std::vector<bool>{false, true}));  // the 4th batch is the last
    // The skip served one pass; the next one is whole and ends on the 4th.
    ends.clear();
    for (auto& batch : loader) {
      (void)batch;
      ends.push_back(loader.end_of_dataloader());
    }
    EXPECT_EQ(ends, (std::vector<bool>{false, false, false, true}));
    EXPECT_EQ(loader.epoch(), epoch + 2);
  }
}

TEST(DataLoader, SkipInAShuffledLaterEpochContinuesThatEpochsOrder) {
  DataLoader reference(IndexDataset(20), DataLoaderOptions(4).shuffle(true).seed(3));
  reference.set_epoch(3);
  const auto full = one_pass(reference);
  DataLoader loader(IndexDataset(20), DataLoaderOptions(4).shuffle(true).seed(3));
  loader.set_epoch(3);
  loader.skip_first_batches(3);
  EXPECT_EQ(one_pass(loader), Batches(full.begin() + 3, full.end()));
  loader.set_epoch(3);
  loader.skip_first_batches(1);
  loader.set_epoch(4);  // a skip meant for another epoch is dropped
  EXPECT_EQ(one_pass(loader).size(), 5u);
}

TEST(DataLoader, PositionsRestoreTheExactStream) {
  DataLoader original(IndexDataset(20), DataLoaderOptions(4).shuffle(true));
  Batches expected;
  one_pass(original);  // epoch 0
  DataLoaderPosition saved;
  size_t seen = 0;
  for (auto& batch : original) {  // epoch 1, checkpointed after two batches
    if (++seen == 2) saved = original.position();
    if (seen > 2) expected.push_back(testing::targets_of(batch));
  }
  const auto epoch2 = one_pass(original);
  EXPECT_EQ(saved.epoch, 1);
  EXPECT_EQ(saved.batches_yielded, 2u);
  EXPECT_EQ(saved.shuffle_seed, original.shuffle_seed());
  EXPECT_EQ(original.position(), (DataLoaderPosition{3, 0, original.shuffle_seed()}));

  DataLoader resumed(IndexDataset(20), DataLoaderOptions(4).shuffle(true));
  resumed.restore_position(deserialize<DataLoaderPosition>(serialize(saved)));
  EXPECT_EQ(resumed.position(), saved);
  resumed.set_epoch(1);  // what a training loop does at the top of the epoch
  EXPECT_EQ(one_pass(resumed), expected);
  EXPECT_EQ(one_pass(resumed), epoch2);
}

TEST(DataLoader, ObserversSeeEveryPassBeginAndEnd) {
  DataLoader loader(IndexDataset(6), DataLoaderOptions(2));
  std::vector<IterationEvent> events;
  const size_t id = loader.add_iteration_observer([&](DataLoaderBase& which, IterationEvent event) {
    EXPECT_EQ(&which, &loader);
    EXPECT_EQ(which.is_iterating(), event == IterationEvent::kBegin);
    events.push_back(event);
  });
  one_pass(loader);
  for (auto& batch : loader) {
    (void)batch;
    break;
  }
  loader.remove_iteration_observer(id);
  one_pass(loader);
  using E = IterationEvent;
  EXPECT_EQ(events, (std::vector<E>{E::kBegin, E::kEnd, E::kBegin, E::kEnd}));
}

TEST(DataLoader, PinMemoryPinsOnlyWhereCudaIs) {
  DataLoader loader(IndexDataset(4), DataLoaderOptions(2).pin_memory(true).num_workers(1));
  for (auto& batch : loader) EXPECT_EQ(batch.data.is_pinned(), can_pin_memory());
}

TEST(DataLoader, MovesBatchesToItsDevice) {
  DataLoader loader(IndexDataset(4), DataLoaderOptions(2));
  loader.set_device(c10::Device(c10::kCPU));
  for (auto& batch : loader) EXPECT_TRUE(batch.target.device().is_cpu());
  struct Opaque {};
  DataLoader opaque(IndexDataset(4), DataLoaderOptions(2),
                    [](std::vector<Example>) { return Opaque{}; });
  EXPECT_NO_THROW(opaque.set_device(c10::Device(c10::kCPU)));
  EXPECT_THROW(opaque.set_device(c10::Device(c10::kCUDA, 0)), ConfigError);
}

TEST(DataLoader, UnpreparedLoaderIsOneProcessAndTruncatesNothing) {
  DataLoader loader(IndexDataset(10), DataLoaderOptions(4));
  loader.configure_sharding(nullptr, DataLoaderConfiguration().split_batches(true));
  EXPECT_EQ(loader.sharding().num_processes(), 1u);
  for (auto& batch : loader) {
    auto kept = truncate_for_metrics(batch.target, loader);
    EXPECT_EQ(kept.size(0), batch.target.size(0));
  }
}

}  // namespace
}  // namespace accelerate
