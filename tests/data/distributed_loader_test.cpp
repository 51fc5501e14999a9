// DataLoader sharded over ranks (threads of this process over real Gloo):
// Accelerate's tested batches through the loader, shuffling on every rank,
// dispatch_batches, and gather_for_metrics counts end to end; for each of the
// four dataset kinds (our map-style and iterable test datasets, and their
// LibTorch counterparts: a .map(...).map(Stack<>()) pipeline and a
// StatefulDataset).
#include "accelerate/data/data_loader.h"

#include <algorithm>
#include <numeric>
#include <set>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "accelerate/distributed/collectives.h"
#include "data/test_datasets.h"
#include "data/torch_test_datasets.h"
#include "support/thread_ranks.h"

namespace accelerate {
using accelerate::testing::borrow;

namespace {

using accelerate::testing::run_ranks;
using testing::DatasetProbe;
using testing::IndexDataset;
using testing::IndexStream;
using Batches = std::vector<std::vector<int64_t>>;

struct LoaderSetup {
  size_t length = 0;
  size_t batch_size = 1;
  bool split = false;
  bool dispatch = false;
  bool even = true;
  bool drop_last = false;
  bool iterable = false;
  // LibTorch's kind instead of ours: a batch dataset (a .map(Stack<>())
  // pipeline) for map-style, a StatefulDataset for iterable.
  bool torch_style = false;
  size_t workers = 0;
  std::string describe() const {
    return std::to_string(length) + " items, batch " + std::to_string(batch_size) +
           (split ? ", split" : "") + (dispatch ? ", dispatch" : "") + (even ? "" : ", uneven") +
           (drop_last ? ", drop_last" : "") + (iterable ? ", iterable" : ", map-style") +
           (torch_style ? " (LibTorch's)" : "") + ", " + std::to_string(workers) + " workers";
  }
};

DataLoaderConfiguration configuration(const LoaderSetup& setup) {
  return DataLoaderConfiguration()
      .split_batches(setup.split)
      .dispatch_batches(setup.dispatch)
      .even_batches(setup.even);
}

DataLoaderOptions options(const LoaderSetup& setup) {
  return DataLoaderOptions(setup.batch_size).drop_last(setup.drop_last).num_workers(setup.workers);
}

// Runs `body(loader)` on a loader for `setup`, prepared for `comm`.
template <class Body>
void with_loader(Communicator& comm, const LoaderSetup& setup, Body&& body,
                 std::shared_ptr<DatasetProbe> probe = nullptr) {
  if (setup.iterable && setup.torch_style) {
    DataLoader loader(testing::IndexStatefulStream(setup.length, probe), options(setup));
    loader.configure_sharding(borrow(comm), configuration(setup));
    body(loader);
  } else if (setup.torch_style) {
    DataLoader loader(testing::index_pipeline(setup.length, probe), options(setup));
    loader.configure_sharding(borrow(comm), configuration(setup));
    body(loader);
  } else if (setup.iterable) {
    DataLoader loader(IndexStream<>(setup.length, probe), options(setup));
    loader.configure_sharding(borrow(comm), configuration(setup));
    body(loader);
  } else {
    DataLoader loader(IndexDataset(setup.length, probe), options(setup));
    loader.configure_sharding(borrow(comm), configuration(setup));
    body(loader);
  }
}

Batches expected_batches(const LoaderSetup& setup, size_t processes, size_t rank) {
  std::vector<size_t> order(setup.length);
  std::iota(order.begin(), order.end(), size_t{0});
  return testing::as_int64(shard_batches(order, BatchSharding()
                                                    .batch_size(setup.batch_size)
                                                    .num_processes(processes)
                                                    .process_index(rank)
                                                    .split_batches(setup.split)
                                                    .even_batches(setup.even)
                                                    .drop_last(setup.drop_last)));
}

TEST(DistributedLoader, ShardsLikeTheReferenceInEveryMode) {
  run_ranks(2, [](Communicator& comm) {
    for (size_t length : {24, 21, 22, 20, 2}) {
      for (int flags = 0; flags < 64; ++flags) {
        LoaderSetup setup;
        setup.length = length;
        setup.split = flags & 1;
        setup.batch_size = setup.split ? 4 : 3;
        setup.dispatch = flags & 2;
        setup.even = !(flags & 4);
        setup.drop_last = flags & 8;
        setup.iterable = flags & 16;
        setup.torch_style = flags & 32;
        setup.workers = length % 2;
        with_loader(comm, setup, [&](auto& loader) {
          const auto expected = expected_batches(setup, 2, comm.rank());
          Batches batches;
          std::vector<bool> ends;
          for (auto& batch : loader) {
            batches.push_back(testing::targets_of(batch));
            ends.push_back(loader.end_of_dataloader());
          }
          EXPECT_EQ(batches, expected) << "rank " << comm.rank() << ": " << setup.describe();
          std::vector<bool> expected_ends(expected.size(), false);
          if (!expected_ends.empty()) expected_ends.back() = true;
          EXPECT_EQ(ends, expected_ends) << "rank " << comm.rank() << ": " << setup.describe();
          if (!setup.iterable) {
            EXPECT_EQ(loader.size(), expected.size()) << setup.describe();
          }
        });
      }
    }
  });
}

TEST(DistributedLoader, SplitBatchesRejectAnIndivisibleBatchSize) {
  run_ranks(2, [](Communicator& comm) {
    DataLoader loader(IndexDataset(10), DataLoaderOptions(3));
    EXPECT_THROW(
        loader.configure_sharding(borrow(comm), DataLoaderConfiguration().split_batches(true)),
        ConfigError);
  });
}

TEST(DistributedLoader, ShuffledOrderIsTheSameOnEveryProcess) {
  run_ranks(2, [](Communicator& comm) {
    // Each rank draws its own default seed (the ranks share one default
    // generator here, so the draws differ); preparing agrees on process 0's.
    auto check = [&](auto& loader) {
      loader.configure_sharding(borrow(comm), DataLoaderConfiguration());
      auto seeds = gather_object(comm, loader.shuffle_seed());
      EXPECT_EQ(seeds[0], seeds[1]);
      for (int epoch = 0; epoch < 2; ++epoch) {
        std::vector<int64_t> mine;
        for (auto& batch : loader) {
          auto targets = testing::targets_of(batch);
          mine.insert(mine.end(), targets.begin(), targets.end());
        }
        auto everyone = gather_object(comm, mine);
        EXPECT_EQ(std::set<int64_t>(everyone.begin(), everyone.end()).size(), 24u)
            << "the ranks' shards of one permutation cover the dataset once";
      }
    };
    DataLoader loader(IndexDataset(24), DataLoaderOptions(3).shuffle(true));
    check(loader);
    DataLoader pipeline(testing::index_pipeline(24), DataLoaderOptions(3).shuffle(true));
    check(pipeline);
    DataLoader seeded(IndexDataset(24), DataLoaderOptions(3).shuffle(true));
    seeded.configure_sharding(borrow(comm), DataLoaderConfiguration().data_seed(11));
    EXPECT_EQ(seeded.shuffle_seed(), 11u);
  });
}

// Accelerate's gather_for_metrics: gather the batch's targets, drop the
// padding on the last batch; the result must be each sample exactly once.
template <class Loader>
std::vector<int64_t> gather_for_metrics_pass(Communicator& comm, Loader& loader) {
  std::vector<int64_t> gathered;
  for (auto& batch : loader) {
    auto kept = truncate_for_metrics(gather(comm, batch.target), loader).contiguous();
    gathered.insert(gathered.end(), kept.template data_ptr<int64_t>(),
                    kept.template data_ptr<int64_t>() + kept.numel());
  }
  return gathered;
}

void expect_gathered_once(size_t processes, size_t length, size_t batch_size) {
  run_ranks(static_cast<int>(processes), [&](Communicator& comm) {
    for (int flags = 0; flags < 16; ++flags) {
      LoaderSetup setup;
      setup.length = length;
      setup.split = flags & 1;
      setup.batch_size = setup.split ? batch_size * processes : batch_size;
      setup.dispatch = flags & 2;
      setup.iterable = flags & 4;
      setup.torch_style = flags & 8;
      with_loader(comm, setup, [&](auto& loader) {
        auto gathered = gather_for_metrics_pass(comm, loader);
        EXPECT_EQ(gathered.size(), length) << processes << " ranks, " << setup.describe();
        std::sort(gathered.begin(), gathered.end());
        std::vector<int64_t> all(length);
        std::iota(all.begin(), all.end(), int64_t{0});
        EXPECT_EQ(gathered, all) << processes << " ranks, " << setup.describe();
      });
    }
  });
}

TEST(DistributedLoader, GatherForMetricsCounts82) { expect_gathered_once(2, 82, 8); }
TEST(DistributedLoader, GatherForMetricsCounts99) { expect_gathered_once(2, 99, 8); }
TEST(DistributedLoader, GatherForMetricsCounts512) { expect_gathered_once(2, 512, 16); }
TEST(DistributedLoader, GatherForMetricsCounts99OnThreeRanks) { expect_gathered_once(3, 99, 4); }
TEST(DistributedLoader, GatherForMetricsCounts82OnThreeRanks) { expect_gathered_once(3, 82, 5); }

// 10·N+1 items in batches of 5 with drop_last: two batches per rank and the
// second gathers exactly 5·N (Accelerate 0.22 cut it to 1: #2007).
TEST(DistributedLoader, GatherForMetricsWithDropLastKeepsTheWholeLastBatch) {
  for (int processes : {2, 3}) {
    run_ranks(processes, [&](Communicator& comm) {
      for (int flags = 0; flags < 8; ++flags) {
        LoaderSetup setup;
        setup.length = 10 * processes + 1;
        setup.batch_size = 5;
        setup.drop_last = true;
        setup.dispatch = flags & 1;
        setup.iterable = flags & 2;
        setup.torch_style = flags & 4;
        with_loader(comm, setup, [&](auto& loader) {
          std::vector<int64_t> counts;
          for (auto& batch : loader) {
            counts.push_back(truncate_for_metrics(gather(comm, batch.target), loader).size(0));
            if (loader.end_of_dataloader()) {
              EXPECT_EQ(loader.remainder(), 0);
            }
          }
          EXPECT_EQ(counts, (std::vector<int64_t>{5 * processes, 5 * processes}))
              << setup.describe();
        });
      }
    });
  }
}

TEST(DistributedLoader, GatherForMetrics22SamplesInBatchesOf4) {
  run_ranks(2, [](Communicator& comm) {
    for (int flags = 0; flags < 8; ++flags) {
      LoaderSetup setup;
      setup.length = 22;
      setup.batch_size = 4;
      setup.dispatch = flags & 1;
      setup.iterable = flags & 2;
      setup.torch_style = flags & 4;
      with_loader(comm, setup, [&](auto& loader) {
        auto gathered = gather_for_metrics_pass(comm, loader);
        EXPECT_EQ(gathered.size(), 22u) << setup.describe();
        EXPECT_EQ(std::set<int64_t>(gathered.begin(), gathered.end()).size(), 22u)
            << setup.describe();
        // Objects (gather_object) are truncated the same way.
        std::vector<int64_t> objects;
        for (auto& batch : loader) {
          auto kept = truncate_for_metrics(gather_object(comm, testing::targets_of(batch)), loader);
          objects.insert(objects.end(), kept.begin(), kept.end());
        }
        EXPECT_EQ(std::set<int64_t>(objects.begin(), objects.end()).size(), 22u);
        EXPECT_EQ(objects.size(), 22u) << setup.describe();
      });
    }
  });
}

// A ChunkDataset (LibTorch's stateful dataset, shared) on 2 ranks: process 0
// reads it and every sample is gathered once.
TEST(DistributedLoader, ChunkDatasetIsDispatchedAndGatheredOnce) {
  run_ranks(2, [](Communicator& comm) {
    DataLoader loader(testing::index_chunk_dataset(/*chunks=*/5, /*per_chunk=*/7, /*batch_size=*/3),
                      DataLoaderOptions(3));
    loader.configure_sharding(borrow(comm), DataLoaderConfiguration());
    EXPECT_TRUE(loader.dispatches_batches()) << "the default for streams";
    for (int epoch = 0; epoch < 2; ++epoch) {
      auto gathered = gather_for_metrics_pass(comm, loader);
      std::sort(gathered.begin(), gathered.end());
      std::vector<int64_t> all(35);
      std::iota(all.begin(), all.end(), int64_t{0});
      EXPECT_EQ(gathered, all) << "epoch " << epoch;
    }
  });
}

TEST(DistributedLoader, DispatchReadsOnlyOnProcessZero) {
  run_ranks(2, [](Communicator& comm) {
    for (int flags = 0; flags < 4; ++flags) {
      const bool iterable = flags & 1;
      auto probe = std::make_shared<DatasetProbe>();
      LoaderSetup setup;
      setup.length = 13;
      setup.batch_size = 2;
      setup.dispatch = true;
      setup.iterable = iterable;
      setup.torch_style = flags & 2;
      setup.workers = 2;
      with_loader(
          comm, setup,
          [&](auto& loader) {
            size_t batches = 0;
            for (auto& batch : loader) batches += batch.target.size(0) > 0;
            EXPECT_EQ(batches, 4u);
          },
          probe);
      if (comm.rank() == 0) {
        // map-style: padding is read too
        EXPECT_EQ(probe->gets.load(), iterable ? 13u : 16u) << setup.describe();
      } else {
        EXPECT_EQ(probe->gets.load(), 0u) << setup.describe();
      }
    }
  });
}

TEST(DistributedLoader, DispatchTellsEveryProcessWhenProcessZeroFails) {
  run_ranks(2, [](Communicator& comm) {
    auto probe = std::make_shared<DatasetProbe>();
    probe->fail_at = 5;
    LoaderSetup setup;
    setup.length = 20;
    setup.batch_size = 2;
    setup.dispatch = true;
    with_loader(
        comm, setup,
        [&](auto& loader) {
          size_t batches = 0;
          try {
            for (auto& batch : loader) batches += batch.target.size(0) > 0;
            ADD_FAILURE() << "rank " << comm.rank() << " finished the epoch";
          } catch (const std::exception& error) {
            const std::string what = error.what();
            EXPECT_NE(what.find("example 5 is broken"), std::string::npos) << what;
            if (comm.rank() != 0) {
              EXPECT_NE(what.find("process 0"), std::string::npos) << what;
            }
          }
          EXPECT_EQ(batches, 1u) << "rank " << comm.rank();
        },
        probe);
  });
}

TEST(DistributedLoader, DispatchedSkipResumesEveryProcess) {
  run_ranks(2, [](Communicator& comm) {
    for (int flags = 0; flags < 4; ++flags) {
      LoaderSetup setup;
      setup.length = 16;
      setup.batch_size = 2;
      setup.dispatch = true;
      setup.iterable = flags & 1;
      setup.torch_style = flags & 2;
      with_loader(comm, setup, [&](auto& loader) {
        loader.set_epoch(2);
        loader.skip_first_batches(2);
        const auto all = expected_batches(setup, 2, comm.rank());
        Batches batches;
        std::vector<bool> ends;
        for (auto& batch : loader) {
          batches.push_back(testing::targets_of(batch));
          ends.push_back(loader.end_of_dataloader());
          EXPECT_EQ(loader.position().batches_yielded, 2 + batches.size());
        }
        EXPECT_EQ(batches, Batches(all.begin() + 2, all.end()));
        EXPECT_EQ(ends, (std::vector<bool>{false, true}));
        EXPECT_EQ(loader.epoch(), 3);
      });
    }
  });
}

}  // namespace
}  // namespace accelerate
