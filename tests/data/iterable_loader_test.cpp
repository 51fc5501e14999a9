// DataLoader over iterable datasets in one process: restarts, lookahead for
// end_of_dataloader, sizes, workers.
#include "accelerate/data/data_loader.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "data/test_datasets.h"

namespace accelerate {
namespace {

using testing::DatasetProbe;
using testing::IndexDataset;
using testing::IndexStream;
using testing::one_pass;
using Batches = std::vector<std::vector<int64_t>>;

static_assert(is_iterable_dataset<IndexStream<>>, "");
static_assert(!is_map_style_dataset<IndexStream<>>, "");
static_assert(is_map_style_dataset<IndexDataset>, "");

TEST(IterableLoader, GivesTheSameBatchesAsMapStyle) {
  for (size_t length : {0, 1, 7, 8, 9, 16}) {
    for (bool drop_last : {false, true}) {
      for (size_t workers : {0, 2}) {
        auto options = DataLoaderOptions(4).drop_last(drop_last).num_workers(workers);
        DataLoader map_style(IndexDataset(length), options);
        DataLoader stream(IndexStream<>(length), options);
        EXPECT_EQ(one_pass(stream), one_pass(map_style))
            << length << " items, drop_last " << drop_last << ", " << workers << " workers";
      }
    }
  }
}

TEST(IterableLoader, KnowsTheLastBatchOneAhead) {
  for (size_t length : {8, 9, 4, 3}) {
    DataLoader loader(IndexStream<>(length), DataLoaderOptions(4));
    std::vector<bool> ends;
    std::vector<int64_t> remainders;
    for (auto& batch : loader) {
      (void)batch;
      ends.push_back(loader.end_of_dataloader());
      remainders.push_back(loader.remainder());
    }
    std::vector<bool> expected(ends.size(), false);
    expected.back() = true;
    EXPECT_EQ(ends, expected) << length << " items";
    EXPECT_EQ(remainders.back(), 0) << "one process pads nothing";
    if (remainders.size() > 1) {
      EXPECT_EQ(remainders.front(), -1) << "not known before the end";
    }
  }
}

TEST(IterableLoader, RestartsTheStreamEveryEpochAndTellsItTheEpoch) {
  auto probe = std::make_shared<DatasetProbe>();
  DataLoader loader(IndexStream<>(6, probe), DataLoaderOptions(4));
  EXPECT_EQ(one_pass(loader), (Batches{{0, 1, 2, 3}, {4, 5}}));
  EXPECT_EQ(probe->last_epoch.load(), 0);
  EXPECT_EQ(one_pass(loader), (Batches{{0, 1, 2, 3}, {4, 5}}));
  EXPECT_EQ(probe->last_epoch.load(), 1);
  EXPECT_EQ(probe->resets.load(), 2u);
}

TEST(IterableLoader, SizeNeedsTheStreamToTellItsLength) {
  DataLoader unknown(IndexStream<>(10), DataLoaderOptions(4));
  EXPECT_FALSE(unknown.known_size().has_value());
  EXPECT_THROW(unknown.size(), Error);
  DataLoader known(IndexStream<true>(10), DataLoaderOptions(4));
  EXPECT_EQ(known.size(), 3u);
}

TEST(IterableLoader, SkipsByReadingWithoutCollating) {
  auto probe = std::make_shared<DatasetProbe>();
  DataLoader loader(IndexStream<>(16, probe), DataLoaderOptions(4));
  loader.skip_first_batches(2);
  std::vector<bool> ends;
  Batches batches;
  for (auto& batch : loader) {
    batches.push_back(testing::targets_of(batch));
    ends.push_back(loader.end_of_dataloader());
  }
  EXPECT_EQ(batches, (Batches{{8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(ends, (std::vector<bool>{false, true}));
}

TEST(IterableLoader, AStreamErrorReachesTheLoopAtItsBatch) {
  for (size_t workers : {0, 2}) {
    auto probe = std::make_shared<DatasetProbe>();
    probe->fail_at = 9;
    DataLoader loader(IndexStream<>(20, probe), DataLoaderOptions(4).num_workers(workers));
    Batches seen;
    EXPECT_THROW(
        {
          for (auto& batch : loader) seen.push_back(testing::targets_of(batch));
        },
        std::runtime_error);
    // Example 9 is read ahead while batch 1 (4..7) is claimed: the error
    // takes batch 1's place, after batch 0, whatever the workers.
    EXPECT_EQ(seen, (Batches{{0, 1, 2, 3}})) << workers;
  }
}

}  // namespace
}  // namespace accelerate
