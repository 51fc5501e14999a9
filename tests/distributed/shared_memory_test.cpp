// The shared-memory all-reduce (src/distributed/shared_memory_collectives.h):
// ranks as threads of this process, each mapping the segment on its own,
// exactly as separate processes do. Sums are checked bitwise against the
// rank-ordered sum computed locally, for every served dtype, for empty,
// tiny, odd and multi-piece sizes; failures must name the rank at fault.
// Process exit during a sum is tested with real processes in
// rendezvous_test.cpp.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "accelerate/common/errors.h"
#include "common/shared_memory_names.h"
#include "distributed/rank_contributions.h"
#include "distributed/shared_memory_collectives.h"
#include "distributed/shared_memory_segment.h"
#include "support/thread_ranks.h"

using accelerate::Communicator;
using accelerate::DistributedError;
using accelerate::detail::SharedMemoryCollectives;
using accelerate::detail::SharedMemorySegment;
using namespace accelerate::testing;
using ::testing::HasSubstr;

namespace {

std::vector<std::string> segments_named_for_this_process() {
  return accelerate::shared_memory_names_of(::getpid());
}

// One piece is 8 MiB per rank on 2 and 3 ranks (slot_bytes_for): 2 pieces
// and a remainder.
constexpr int64_t kMultiPieceBytes = (int64_t{16} << 20) + 4 * 17;

using SumCase = std::tuple<int, at::ScalarType>;

class SharedMemorySum : public ::testing::TestWithParam<SumCase> {};

TEST_P(SharedMemorySum, EqualsTheRankOrderedSumBitwiseAtEverySize) {
  const int world = std::get<0>(GetParam());
  const at::ScalarType dtype = std::get<1>(GetParam());
  const int64_t element = static_cast<int64_t>(c10::elementSize(dtype));
  const std::vector<int64_t> sizes = {0, 1, world - 1, 5, 1000, 4099, kMultiPieceBytes / element};
  run_ranks(world, [&](Communicator& comm) {
    ASSERT_TRUE(comm.sums_cpu_tensors_in_shared_memory());
    for (int64_t numel : sizes) {
      SCOPED_TRACE("rank " + std::to_string(comm.rank()) + ", " + std::to_string(numel) +
                   " elements");
      at::Tensor mine = contribution(comm.rank(), numel, dtype);
      comm.all_reduce_sum_async(mine, "test sum").wait();
      EXPECT_TRUE(at::equal(mine, rank_ordered_sum(world, numel, dtype)));
    }
  });
}

std::string sum_case_name(const ::testing::TestParamInfo<SumCase>& info) {
  return std::to_string(std::get<0>(info.param)) + "_ranks_" +
         c10::toString(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(DtypesAndWorlds, SharedMemorySum,
                         ::testing::Combine(::testing::Values(2, 3),
                                            ::testing::Values(at::kFloat, at::kDouble, at::kHalf,
                                                              at::kInt, at::kLong)),
                         sum_case_name);

TEST(SharedMemory, ManyQueuedSumsFinishInOrderAndCorrect) {
  run_ranks(3, [](Communicator& comm) {
    std::vector<at::Tensor> tensors;
    std::vector<accelerate::PendingCollective> pending;
    for (int k = 0; k < 24; ++k) {
      tensors.push_back(contribution(comm.rank(), 100 + 37 * k, at::kFloat));
      pending.push_back(comm.all_reduce_sum_async(tensors.back(), "sum " + std::to_string(k)));
    }
    for (int k = 23; k >= 0; --k) pending[k].wait();  // any order of waiting
    for (int k = 0; k < 24; ++k) {
      EXPECT_TRUE(at::equal(tensors[k], rank_ordered_sum(3, 100 + 37 * k, at::kFloat))) << k;
    }
  });
}

TEST(SharedMemory, BlockingSumAndMeanGoThroughItToo) {
  run_ranks(2, [](Communicator& comm) {
    at::Tensor sum = contribution(comm.rank(), 333, at::kFloat);
    comm.all_reduce(sum, accelerate::ReduceOp::kSum);
    EXPECT_TRUE(at::equal(sum, rank_ordered_sum(2, 333, at::kFloat)));
    at::Tensor mean = contribution(comm.rank(), 333, at::kDouble);
    comm.all_reduce(mean, accelerate::ReduceOp::kMean);
    EXPECT_TRUE(at::equal(mean, rank_ordered_sum(2, 333, at::kDouble) / 2));
    // bool: widened to int32 on the way.
    at::Tensor flags = at::tensor({comm.rank() == 0 ? 1 : 0, 1}, at::kInt).to(at::kBool);
    comm.all_reduce(flags, accelerate::ReduceOp::kSum);
    EXPECT_TRUE(flags[0].item<bool>() && flags[1].item<bool>());
  });
}

TEST(SharedMemory, MatchesGlooBitwiseOnTwoRanks) {
  std::vector<at::Tensor> results[2];
  for (bool shared : {false, true}) {
    RankOptions options;
    options.shared_memory_all_reduce = shared;
    run_ranks(
        2,
        [&](Communicator& comm) {
          EXPECT_EQ(comm.sums_cpu_tensors_in_shared_memory(), shared);
          at::Tensor mine = contribution(comm.rank(), 100003, at::kFloat);
          comm.all_reduce_sum_async(mine, "test sum").wait();
          if (comm.rank() == 0) results[shared ? 1 : 0].push_back(mine);
        },
        options);
  }
  ASSERT_EQ(results[0].size(), 1u);
  ASSERT_EQ(results[1].size(), 1u);
  EXPECT_TRUE(at::equal(results[0][0], results[1][0]));
}

TEST(SharedMemory, WhatItDoesNotServeStillWorksThroughGloo) {
  EXPECT_FALSE(SharedMemoryCollectives::serves(at::ones({4}, at::kByte)));
  EXPECT_FALSE(SharedMemoryCollectives::serves(at::ones({4}, at::kShort)));
  EXPECT_FALSE(SharedMemoryCollectives::serves(at::ones({2, 4}, at::kFloat).t()));
  EXPECT_TRUE(SharedMemoryCollectives::serves(at::ones({2, 4}, at::kFloat)));
  run_ranks(2, [](Communicator& comm) {
    at::Tensor bytes = at::full({3}, comm.rank() + 1, at::kByte);
    comm.all_reduce(bytes, accelerate::ReduceOp::kSum);
    EXPECT_TRUE(at::equal(bytes, at::full({3}, 3, at::kByte)));
    at::Tensor largest = at::arange(4, at::kFloat) * (comm.rank() == 0 ? 1 : -1);
    comm.all_reduce(largest, accelerate::ReduceOp::kMax);
    EXPECT_TRUE(at::equal(largest, at::arange(4, at::kFloat)));
  });
}

TEST(SharedMemory, MismatchedSizesAreAnErrorOnEveryRank) {
  std::atomic<int> failures{0};
  run_ranks(2, [&](Communicator& comm) {
    at::Tensor mine = at::ones({10 + comm.rank()}, at::kFloat);
    try {
      comm.all_reduce_sum_async(mine, "gradient bucket 0").wait();
      ADD_FAILURE() << "rank " << comm.rank() << " summed mismatched tensors";
    } catch (const DistributedError& error) {
      const std::string expected = comm.rank() == 0
                                       ? "rank 1 sums 11 elements of Float where rank 0 sums 10"
                                       : "rank 0 sums 10 elements of Float where rank 1 sums 11";
      EXPECT_THAT(error.what(), HasSubstr("gradient bucket 0: " + expected));
      ++failures;
    }
  });
  EXPECT_EQ(failures.load(), 2);
}

TEST(SharedMemory, DifferentDtypesAreAnError) {
  std::atomic<int> failures{0};
  run_ranks(2, [&](Communicator& comm) {
    at::Tensor mine = at::ones({10}, comm.rank() == 0 ? at::kFloat : at::kDouble);
    try {
      comm.all_reduce_sum_async(mine, "test sum").wait();
      ADD_FAILURE() << "rank " << comm.rank() << " summed mismatched dtypes";
    } catch (const DistributedError& error) {
      EXPECT_THAT(error.what(), HasSubstr(comm.rank() == 0 ? "rank 1 sums 10 elements of Double"
                                                           : "rank 0 sums 10 elements of Float"));
      ++failures;
    }
  });
  EXPECT_EQ(failures.load(), 2);
}

// Rank 0 sums one tensor of a piece and 5 elements; rank 1 a piece-sized
// tensor, then 5 elements. Every piece alone matches; the tensors do not.
TEST(SharedMemory, TensorsCutDifferentlyAreAnErrorNotAMixedSum) {
  std::atomic<int> failures{0};
  run_ranks(2, [&](Communicator& comm) {
    const int64_t piece = static_cast<int64_t>(8 << 20) / 4;  // float elements per slot
    std::vector<int64_t> sizes =
        comm.rank() == 0 ? std::vector<int64_t>{piece + 5} : std::vector<int64_t>{piece, 5};
    try {
      for (int64_t size : sizes) {
        at::Tensor mine = at::ones({size}, at::kFloat);
        comm.all_reduce_sum_async(mine, "test sum").wait();
      }
      ADD_FAILURE() << "rank " << comm.rank() << " summed tensors cut differently";
    } catch (const DistributedError& error) {
      EXPECT_THAT(error.what(),
                  HasSubstr("sums " + std::to_string(piece + (comm.rank() == 0 ? 0 : 5))));
      ++failures;
    }
  });
  EXPECT_EQ(failures.load(), 2);
}

// A rank whose communicator is gone (an error it caught, an early return)
// while its process lives on: the others fail at once, not after the timeout.
TEST(SharedMemory, RankThatClosedItsCommunicatorIsNamedAtOnce) {
  RankOptions options;
  options.timeout = std::chrono::seconds(60);
  std::atomic<bool> rank0_done{false};
  run_rank_communicators(
      2,
      [&](std::shared_ptr<Communicator> comm) {
        if (comm->rank() == 1) {
          comm.reset();
          while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          return;
        }
        at::Tensor mine = at::ones({64}, at::kFloat);
        const auto start = std::chrono::steady_clock::now();
        try {
          comm->all_reduce_sum_async(mine, "gradient bucket 0").wait();
          ADD_FAILURE() << "the sum finished without rank 1";
        } catch (const DistributedError& error) {
          EXPECT_THAT(
              error.what(),
              HasSubstr("rank 1 failed or closed its communicator before gradient bucket 0"));
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
        rank0_done = true;
      },
      options);
}

// One rank turned it off: every rank falls back to Gloo at once, none waits.
TEST(SharedMemory, TurnedOffOnOneRankMeansOffEverywhere) {
  for (int off_rank : {0, 1}) {
    const std::string path = fresh_store_path();
    std::vector<std::thread> ranks;
    std::vector<std::string> errors(3);
    const auto start = std::chrono::steady_clock::now();
    for (int rank = 0; rank < 3; ++rank) {
      ranks.emplace_back([&, rank] {
        try {
          auto comm = Communicator::connect_through_file(
              path, thread_rank_job(rank, 3, std::chrono::seconds(60), false, rank != off_rank));
          EXPECT_FALSE(comm->sums_cpu_tensors_in_shared_memory()) << "rank " << rank;
          at::Tensor mine = at::ones({5}, at::kFloat);
          comm->all_reduce_sum_async(mine, "test sum").wait();
          EXPECT_TRUE(at::equal(mine, at::full({5}, 3.0f)));
        } catch (const std::exception& error) {
          errors[rank] = error.what();
        }
      });
    }
    for (auto& rank : ranks) rank.join();
    ::unlink(path.c_str());
    for (const auto& error : errors) EXPECT_EQ(error, "") << "off on rank " << off_rank;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  }
}

TEST(SharedMemory, AbsentRankIsNamedWithinTheTimeout) {
  RankOptions options;
  options.timeout = std::chrono::seconds(2);
  std::atomic<bool> rank0_done{false};
  run_ranks(
      2,
      [&](Communicator& comm) {
        if (comm.rank() == 1) {  // alive, but never sums
          while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          return;
        }
        at::Tensor mine = at::ones({64}, at::kFloat);
        const auto start = std::chrono::steady_clock::now();
        try {
          comm.all_reduce_sum_async(mine, "gradient bucket 3").wait();
          ADD_FAILURE() << "the sum finished without rank 1";
        } catch (const DistributedError& error) {
          EXPECT_THAT(error.what(), HasSubstr("rank 1 did not reach gradient bucket 3 within 2"));
        }
        const auto elapsed = std::chrono::steady_clock::now() - start;
        EXPECT_GE(elapsed, std::chrono::seconds(2));
        EXPECT_LT(elapsed, std::chrono::seconds(10));  // the timeout plus the diagnosis window
        rank0_done = true;
      },
      options);
}

TEST(SharedMemory, OffWhenAskedAndTheNameNeverOutlivesSetUp) {
  RankOptions off;
  off.shared_memory_all_reduce = false;
  run_ranks(
      2, [](Communicator& comm) { EXPECT_FALSE(comm.sums_cpu_tensors_in_shared_memory()); }, off);
  run_ranks(3, [](Communicator& comm) {
    EXPECT_TRUE(comm.sums_cpu_tensors_in_shared_memory());
    comm.barrier();  // every rank has finished setting up
    EXPECT_EQ(segments_named_for_this_process(), std::vector<std::string>{});
  });
}

// reduce_scatter_buffer's segments are named only until every peer mapped
// them (their first reduce-scatter), or until the communicator closes.
TEST(SharedMemory, ReduceScatterBuffersLeaveNoNamesBehind) {
  run_ranks(3, [](Communicator& comm) {
    at::Tensor used = comm.reduce_scatter_buffer(3 * 1000, at::kFloat).fill_(1);
    at::Tensor unused = comm.reduce_scatter_buffer(3 * 5000, at::kFloat);
    at::Tensor shard = at::empty({1000}, at::kFloat);
    comm.reduce_scatter_sum(used, shard);
    EXPECT_TRUE(at::equal(shard, at::full({1000}, 3.0f)));
    comm.barrier();
    // Three ranks' never-used segments are still named, nothing else.
    EXPECT_EQ(segments_named_for_this_process().size(), 3u);
    comm.barrier();
  });
  EXPECT_EQ(segments_named_for_this_process(), std::vector<std::string>{});
}

TEST(SharedMemorySegment, TooLargeForDevShmIsAnErrorNotASigbusLater) {
  std::string error;
  const std::string name = "/accelerate-" + std::to_string(::getpid()) + "-too-large";
  auto segment = SharedMemorySegment::create(name, std::size_t{1} << 50, &error);
  EXPECT_EQ(segment, nullptr);
  EXPECT_THAT(error, HasSubstr("in /dev/shm"));
  EXPECT_EQ(segments_named_for_this_process(), std::vector<std::string>{});
}

TEST(SharedMemorySegment, ProcessesAreAliveUntilTheyExit) {
  EXPECT_TRUE(accelerate::detail::process_exists(::getpid()));
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  // Unreaped, the child is a zombie: gone for our purposes.
  for (int i = 0; i < 200 && accelerate::detail::process_exists(child); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(accelerate::detail::process_exists(child));
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_FALSE(accelerate::detail::process_exists(child));
}

TEST(SharedMemorySegment, IdentityNamesThisMachineAndItsNamespaces) {
  const std::string identity = accelerate::detail::shared_memory_identity();
  EXPECT_THAT(identity, HasSubstr("ipc:["));
  EXPECT_THAT(identity, HasSubstr("pid:["));
  EXPECT_EQ(identity, accelerate::detail::shared_memory_identity());
}

}  // namespace
