// Batch sharding against Hugging Face Accelerate's tested values and against
// independent oracles of Accelerate's BatchSamplerShard and
// IterableDatasetShard.
#include "accelerate/data/batch_sharding.h"

#include <numeric>

#include <gtest/gtest.h>

#include "accelerate/common/errors.h"
#include "data/sharding_oracle.h"

namespace accelerate {
namespace {

using testing::Batches;

std::vector<size_t> range(size_t length) {
  std::vector<size_t> values(length);
  std::iota(values.begin(), values.end(), size_t{0});
  return values;
}

struct Case {
  size_t length;
  size_t batch_size;
  bool drop_last = false;
  bool even_batches = true;
  bool split_batches = false;
  size_t processes = 2;
};

Batches shard(const Case& c, size_t process) {
  return shard_batches(range(c.length), BatchSharding()
                                            .batch_size(c.batch_size)
                                            .num_processes(c.processes)
                                            .process_index(process)
                                            .drop_last(c.drop_last)
                                            .even_batches(c.even_batches)
                                            .split_batches(c.split_batches));
}

void expect_shards(const Case& c, const Batches& rank0, const Batches& rank1) {
  EXPECT_EQ(shard(c, 0), rank0) << "length " << c.length;
  EXPECT_EQ(shard(c, 1), rank1) << "length " << c.length;
}

TEST(BatchSharding, FullRoundsAreDealtInTurn) {
  const Batches rank0 = {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}};
  const Batches rank1 = {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 22, 23}};
  expect_shards({24, 3}, rank0, rank1);
  expect_shards({24, 3, /*drop_last=*/true}, rank0, rank1);
}

TEST(BatchSharding, EvenBatchesCycleFromTheStart) {
  expect_shards({21, 3}, {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}},
                {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {0, 1, 2}});
  expect_shards({22, 3}, {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}},
                {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 0, 1}});
  expect_shards({20, 3}, {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 0}},
                {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {1, 2, 3}});
  expect_shards({2, 3}, {{0, 1, 0}}, {{1, 0, 1}});
}

TEST(BatchSharding, DropLastKeepsOnlyCompleteRounds) {
  const Batches rank0 = {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}};
  const Batches rank1 = {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}};
  for (size_t length : {20, 21, 22, 23}) expect_shards({length, 3, true}, rank0, rank1);
  expect_shards({2, 3, true}, {}, {});
}

TEST(BatchSharding, UnevenBatchesLeaveTheRestShort) {
  expect_shards({22, 3, false, /*even_batches=*/false},
                {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}},
                {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21}});
  expect_shards({21, 3, false, false}, {{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}},
                {{3, 4, 5}, {9, 10, 11}, {15, 16, 17}});
  expect_shards({2, 3, false, false}, {{0, 1}}, {});
}

TEST(BatchSharding, SplitBatchesGiveEachProcessAPart) {
  const Case split24{24, 4, false, true, /*split_batches=*/true};
  expect_shards(split24, {{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20, 21}},
                {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}, {22, 23}});
  expect_shards({22, 4, false, true, true}, {{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20, 21}},
                {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}, {0, 1}});
  expect_shards({21, 4, false, true, true}, {{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20, 0}},
                {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}, {1, 2}});
  expect_shards({2, 4, false, true, true}, {{0, 1}}, {{0, 1}});
  expect_shards({21, 4, false, false, true}, {{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20}},
                {{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}});
}

TEST(BatchSharding, SplitNeedsADivisibleBatchSize) {
  const auto sharding = BatchSharding().batch_size(3).num_processes(2).split_batches(true);
  EXPECT_THROW(sharding.validate(), ConfigError);
  try {
    sharding.validate();
  } catch (const ConfigError& error) {
    EXPECT_EQ(std::string(error.what()),
              "split_batches: batch_size 3 cannot be split evenly over 2 processes; use a "
              "multiple of 2");
  }
  EXPECT_THROW(shard_batches(range(10), sharding), ConfigError);
  EXPECT_THROW(BatchSharding().batch_size(0).validate(), ConfigError);
  EXPECT_THROW(BatchSharding().num_processes(2).process_index(2).validate(), ConfigError);
}

std::vector<size_t> batch_sizes(const Case& c, size_t process) {
  std::vector<size_t> sizes;
  for (const auto& batch : shard(c, process)) sizes.push_back(batch.size());
  return sizes;
}

TEST(BatchSharding, BatchSizesWithAndWithoutEvenBatches) {
  using Sizes = std::vector<size_t>;
  EXPECT_EQ(batch_sizes({3, 1}, 0), (Sizes{1, 1}));
  EXPECT_EQ(batch_sizes({3, 1}, 1), (Sizes{1, 1}));
  EXPECT_EQ(batch_sizes({7, 2}, 0), (Sizes{2, 2}));
  EXPECT_EQ(batch_sizes({7, 2}, 1), (Sizes{2, 2}));
  EXPECT_EQ(batch_sizes({3, 1, false, false}, 0), (Sizes{1, 1}));
  EXPECT_EQ(batch_sizes({3, 1, false, false}, 1), (Sizes{1}));
  EXPECT_EQ(batch_sizes({7, 2, false, false}, 0), (Sizes{2, 2}));
  EXPECT_EQ(batch_sizes({7, 2, false, false}, 1), (Sizes{2, 1}));
}

TEST(BatchSharding, OneProcessNeverPads) {
  EXPECT_EQ(shard({10, 4, false, true, false, 1}, 0),
            (Batches{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  EXPECT_EQ(shard({10, 4, true, true, false, 1}, 0), (Batches{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(padded_last_step_samples(10, BatchSharding().batch_size(4)), 0u);
}

TEST(BatchSharding, ShardsValuesOfTheOrderNotPositions) {
  const std::vector<size_t> order = {9, 8, 7, 6, 5};
  const auto sharding = BatchSharding().batch_size(2).num_processes(2).process_index(1);
  // The short second step is padded with the order's first values.
  EXPECT_EQ(shard_batches(order, sharding), (Batches{{7, 6}, {8, 7}}));
}

TEST(BatchSharding, RemainderCountsRealSamplesOfAPaddedLastStep) {
  auto sharding = BatchSharding().batch_size(3).num_processes(2);
  EXPECT_EQ(padded_last_step_samples(24, sharding), 0u);
  EXPECT_EQ(padded_last_step_samples(22, sharding), 4u);
  EXPECT_EQ(padded_last_step_samples(2, sharding), 2u);
  EXPECT_EQ(padded_last_step_samples(22, BatchSharding(sharding).drop_last(true)), 0u);
  EXPECT_EQ(padded_last_step_samples(22, BatchSharding(sharding).even_batches(false)), 0u);
  // Accelerate 0.22 answered 1 here (#2007); nothing was padded, so 0.
  EXPECT_EQ(
      padded_last_step_samples(21, BatchSharding().batch_size(5).num_processes(2).drop_last(true)),
      0u);
}

// Every combination against the oracles, and the invariants gather_for_metrics
// relies on.
TEST(BatchSharding, AgreesWithTheOraclesEverywhere) {
  for (size_t processes = 1; processes <= 4; ++processes) {
    for (size_t batch = 1; batch <= 5; ++batch) {
      for (size_t length = 0; length <= 45; ++length) {
        for (int flags = 0; flags < 8; ++flags) {
          Case c{length,           batch * (flags & 4 ? processes : 1),
                 (flags & 1) != 0, (flags & 2) != 0,
                 (flags & 4) != 0, processes};
          const auto sharding = BatchSharding()
                                    .batch_size(c.batch_size)
                                    .num_processes(processes)
                                    .drop_last(c.drop_last)
                                    .even_batches(c.even_batches)
                                    .split_batches(c.split_batches);
          SCOPED_TRACE("processes " + std::to_string(processes) + " batch " +
                       std::to_string(c.batch_size) + " length " + std::to_string(length) +
                       " flags " + std::to_string(flags));
          std::vector<size_t> real;  // samples in step order, padding cut off
          std::vector<Batches> all;
          for (size_t p = 0; p < processes; ++p) {
            auto mine = shard(c, p);
            if (processes > 1) {
              const auto expected =
                  c.split_batches
                      ? testing::batch_sampler_shard_split(range(length), c.batch_size, processes,
                                                           p, c.drop_last, c.even_batches)
                      : testing::batch_sampler_shard(range(length), c.batch_size, processes, p,
                                                     c.drop_last, c.even_batches);
              ASSERT_EQ(mine, expected) << "process " << p;
              if (c.even_batches) {
                ASSERT_EQ(mine, testing::iterable_dataset_shard(length, c.batch_size, processes, p,
                                                                c.drop_last, c.split_batches));
              }
            }
            ASSERT_EQ(mine.size(), sharded_batch_count(length, sharding.for_process(p)));
            all.push_back(mine);
          }
          const size_t steps = global_step_count(length, sharding);
          for (size_t step = 0; step < steps; ++step) {
            for (size_t p = 0; p < processes; ++p) {
              if (step < all[p].size()) {
                real.insert(real.end(), all[p][step].begin(), all[p][step].end());
              }
            }
          }
          const size_t keep = padded_last_step_samples(length, sharding);
          if (keep > 0) real.resize(real.size() - sharding.global_batch_size() + keep);
          const size_t global = sharding.global_batch_size();
          const size_t expected_count = c.drop_last ? length / global * global : length;
          ASSERT_EQ(real, range(expected_count));
        }
      }
    }
  }
}

}  // namespace
}  // namespace accelerate
