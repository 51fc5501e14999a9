// Reduce-scatter and all-gather of flat buffers (Communicator::
// reduce_scatter_sum / all_gather_into), the collectives of sharded
// training. Ranks are threads with real transports: the shared-memory
// segment, and Gloo's all-to-all and all-gather when shared memory is off
// (or the dtype is one it does not sum). Every result is compared bitwise
// with the rank-ordered sum computed locally.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "accelerate/common/errors.h"
#include "distributed/rank_contributions.h"
#include "support/thread_ranks.h"

using accelerate::Communicator;
using accelerate::PendingCollective;
using namespace accelerate::testing;
using ::testing::HasSubstr;

namespace {

// A shard count that makes one shared-memory piece too small: 8 MiB slots
// for 2..4 ranks hold 8 MiB / world of each shard per piece.
constexpr int64_t kMultiPieceShardBytes = (int64_t{5} << 20) + 4 * 13;

struct FlatCase {
  int world;
  bool shared_memory;
};

class FlatCollectives : public ::testing::TestWithParam<FlatCase> {};

// body(comm) on every rank of the case's job, on the case's transport.
void run_flat_case(const FlatCase& c, const std::function<void(Communicator&)>& body) {
  RankOptions options;
  options.shared_memory_all_reduce = c.shared_memory;
  run_ranks(c.world, body, options);
}

// One reduce-scatter to check: every rank's buffer and the expected sum,
// computed once before the ranks start (generating them on every rank costs
// world_size times more).
struct ReduceScatterCheck {
  at::ScalarType dtype;
  int64_t shard_numel;
  std::vector<at::Tensor> buffers;  // by rank
  at::Tensor sum;                   // rank-ordered, of the whole buffer
};

std::vector<ReduceScatterCheck> reduce_scatter_checks(const FlatCase& c) {
  std::vector<ReduceScatterCheck> checks;
  for (at::ScalarType dtype :
       {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kInt, at::kLong}) {
    const int64_t element = static_cast<int64_t>(c10::elementSize(dtype));
    std::vector<int64_t> sizes = {0, 1, 7, 4099};
    // Pieces are a shared-memory matter; one float and one half size cover
    // both of its adders.
    if (c.shared_memory && (dtype == at::kFloat || dtype == at::kHalf)) {
      sizes.push_back(kMultiPieceShardBytes / element);
    }
    for (int64_t n : sizes) {
      ReduceScatterCheck check{dtype, n, {}, {}};
      for (int r = 0; r < c.world; ++r) {
        check.buffers.push_back(contribution(r, n * c.world, dtype));
        check.sum = r == 0 ? check.buffers[0] : check.sum + check.buffers[r];  // rank order
      }
      checks.push_back(std::move(check));
    }
  }
  return checks;
}

TEST_P(FlatCollectives, ReduceScatterIsTheRankOrderedSumOfTheShardBitwise) {
  const FlatCase c = GetParam();
  const std::vector<ReduceScatterCheck> checks = reduce_scatter_checks(c);
  run_flat_case(c, [&](Communicator& comm) {
    ASSERT_EQ(comm.sums_cpu_tensors_in_shared_memory(), c.shared_memory);
    for (const ReduceScatterCheck& check : checks) {
      const int64_t n = check.shard_numel;
      SCOPED_TRACE(std::string(c10::toString(check.dtype)) + ", shards of " + std::to_string(n));
      const at::Tensor& buffer = check.buffers[comm.rank()];
      const at::Tensor before = buffer.clone();
      at::Tensor shard = at::full({n}, 7, check.dtype);
      comm.reduce_scatter_sum(buffer, shard);
      EXPECT_TRUE(at::equal(shard, check.sum.narrow(0, comm.rank() * n, n)));
      EXPECT_TRUE(at::equal(buffer, before)) << "the input buffer must not change";
    }
  });
}

// The sharded engine's buckets come from reduce_scatter_buffer: through
// shared memory peers read them in place, which must give the same sums,
// whether every rank, some or none use one.
TEST_P(FlatCollectives, ReduceScatterFromReduceScatterBuffersIsTheSameSum) {
  const FlatCase c = GetParam();
  const std::vector<ReduceScatterCheck> checks = reduce_scatter_checks(c);
  run_flat_case(c, [&](Communicator& comm) {
    for (const bool every_rank : {true, false}) {
      const bool own = every_rank || comm.rank() % 2 == 0;
      for (const ReduceScatterCheck& check : checks) {
        const int64_t n = check.shard_numel;
        SCOPED_TRACE(std::string(c10::toString(check.dtype)) + ", shards of " + std::to_string(n) +
                     (every_rank ? ", every rank" : ", even ranks"));
        const at::Tensor& values = check.buffers[comm.rank()];
        at::Tensor buffer = own ? comm.reduce_scatter_buffer(values.numel(), values.options())
                                : at::empty_like(values);
        buffer.copy_(values);
        at::Tensor shard = at::full({n}, 7, check.dtype);
        comm.reduce_scatter_sum(buffer, shard);
        EXPECT_TRUE(at::equal(shard, check.sum.narrow(0, comm.rank() * n, n)));
        EXPECT_TRUE(at::equal(buffer, values)) << "the input buffer must not change";
      }
    }
    // Only shared memory has somewhere else to put them.
    EXPECT_EQ(comm.shared_buffer_usage().reserved > 0, c.shared_memory);
  });
}

// A rank may overwrite its buffer as soon as its reduce-scatter returned:
// by then no peer reads it any more (each rank waits for its peers' sums).
TEST_P(FlatCollectives, ReduceScatterBufferMayBeOverwrittenOnceItsCollectiveReturned) {
  const FlatCase c = GetParam();
  const int64_t n = kMultiPieceShardBytes / 4;
  std::vector<at::Tensor> values;
  for (int k = 0; k < 4; ++k) values.push_back(contribution(k, n * c.world, at::kFloat));
  run_flat_case(c, [&](Communicator& comm) {
    at::Tensor buffer = comm.reduce_scatter_buffer(n * c.world, at::kFloat);
    at::Tensor shard = at::empty({n}, at::kFloat);
    for (int step = 0; step < 12; ++step) {
      // Rank r contributes values[(step + r) % 4]; the sum is known to all.
      buffer.copy_(values[(step + comm.rank()) % 4]);
      comm.reduce_scatter_sum(buffer, shard);
      buffer.fill_(std::nanf(""));  // at once: a peer still reading would see NaN
      at::Tensor expected = values[step % 4].narrow(0, comm.rank() * n, n).clone();
      for (int r = 1; r < c.world; ++r) {
        expected += values[(step + r) % 4].narrow(0, comm.rank() * n, n);
      }
      ASSERT_TRUE(at::equal(shard, expected)) << "step " << step;
    }
  });
}

// Buckets come and go every step with the same sizes: freed buffers are
// reused, and what the pool keeps stays bounded; beyond it buffers are
// private and still reduce correctly.
TEST(FlatCollectivesSharedMemory, ReduceScatterBuffersAreReusedAndBounded) {
  const FlatCase c{3, true};
  run_flat_case(c, [&](Communicator& comm) {
    const int64_t numel = int64_t{3} << 16;  // 768 KiB of floats, shards for 2, 3 and 4 ranks
    for (int step = 0; step < 3; ++step) {
      at::Tensor first = comm.reduce_scatter_buffer(numel, at::kFloat);
      at::Tensor second = comm.reduce_scatter_buffer(numel / 2, at::kFloat);
    }
    const std::size_t both = numel * 4 + numel * 2;
    comm.reset_shared_buffer_peak();
    {
      at::Tensor first = comm.reduce_scatter_buffer(numel, at::kFloat);
      at::Tensor second = comm.reduce_scatter_buffer(numel / 2, at::kFloat);
      EXPECT_EQ(comm.shared_buffer_usage().in_use, both);
    }
    const accelerate::SharedBufferUsage usage = comm.shared_buffer_usage();
    EXPECT_EQ(usage.reserved, both);
    EXPECT_EQ(usage.in_use, 0u);
    EXPECT_EQ(usage.peak_in_use, both);
    std::vector<at::Tensor> alive;
    for (int k = 0; k < 12; ++k) alive.push_back(comm.reduce_scatter_buffer(numel, at::kFloat));
    // Eight segments: the two above (the smaller one does not fit) and six
    // new ones; the other five buffers are private memory.
    EXPECT_EQ(comm.shared_buffer_usage().in_use, std::size_t(7 * numel * 4));
    EXPECT_EQ(comm.shared_buffer_usage().reserved, std::size_t(7 * numel * 4 + numel * 2));
    at::Tensor values = contribution(comm.rank(), numel, at::kFloat);
    at::Tensor shard = at::empty({numel / c.world}, at::kFloat);
    alive.back().copy_(values);
    comm.reduce_scatter_sum(alive.back(), shard);
    const at::Tensor sum = rank_ordered_sum(c.world, numel, at::kFloat);
    const int64_t m = numel / c.world;
    EXPECT_TRUE(at::equal(shard, sum.narrow(0, comm.rank() * m, m)));
  });
}

TEST_P(FlatCollectives, AllGatherPutsEveryRanksShardInRankOrder) {
  const FlatCase c = GetParam();
  struct Check {
    int64_t shard_numel;
    std::vector<at::Tensor> shards;  // by rank
  };
  std::vector<Check> checks;  // made once, before the ranks start
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kBool, at::kByte, at::kLong}) {
    const int64_t element = static_cast<int64_t>(c10::elementSize(dtype));
    std::vector<int64_t> sizes = {0, 1, 13};
    if (dtype == at::kFloat) sizes.push_back((int64_t{9} << 20) / element);  // several pieces
    for (int64_t n : sizes) {
      Check check{n, {}};
      for (int r = 0; r < c.world; ++r) {
        const at::Tensor signs = contribution(r, n, at::kFloat).gt(0);
        check.shards.push_back(dtype == at::kBool ? signs : signs.to(dtype) + r);
      }
      checks.push_back(std::move(check));
    }
  }
  run_flat_case(c, [&](Communicator& comm) {
    for (const Check& check : checks) {
      const int64_t n = check.shard_numel;
      SCOPED_TRACE(std::string(c10::toString(check.shards[0].scalar_type())) + ", shards of " +
                   std::to_string(n));
      at::Tensor buffer = at::zeros({n * c.world}, check.shards[0].options());
      comm.all_gather_into(check.shards[comm.rank()], buffer);
      for (int r = 0; r < c.world; ++r) {
        EXPECT_TRUE(at::equal(buffer.narrow(0, r * n, n), check.shards[r])) << "shard " << r;
      }
    }
  });
}

// What sharded training does in place: the shard is this rank's part of the
// gradient buffer, the parameters' shard is its part of the parameter buffer.
TEST_P(FlatCollectives, ShardsMayBeViewsIntoTheBuffer) {
  const FlatCase c = GetParam();
  run_flat_case(c, [&](Communicator& comm) {
    const int64_t n = 1001;
    at::Tensor buffer = contribution(comm.rank(), n * c.world, at::kFloat);
    at::Tensor mine = buffer.narrow(0, comm.rank() * n, n);
    comm.reduce_scatter_sum(buffer, mine);
    const at::Tensor sum = rank_ordered_sum(c.world, n * c.world, at::kFloat);
    EXPECT_TRUE(at::equal(mine, sum.narrow(0, comm.rank() * n, n)));
    comm.all_gather_into(mine, buffer);
    EXPECT_TRUE(at::equal(buffer, sum));
  });
}

TEST_P(FlatCollectives, AsyncCollectivesInFlightTogetherFinishCorrectly) {
  const FlatCase c = GetParam();
  run_flat_case(c, [&](Communicator& comm) {
    std::vector<at::Tensor> buffers, shards, gathered;
    std::vector<PendingCollective> pending;
    for (int k = 0; k < 6; ++k) {
      const int64_t n = 100 + 31 * k;
      buffers.push_back(contribution(comm.rank() + 10 * k, n * c.world, at::kFloat));
      shards.push_back(at::empty({n}, at::kFloat));
      gathered.push_back(at::empty({n * c.world}, at::kFloat));
      pending.push_back(comm.reduce_scatter_sum_async(buffers[k], shards[k], "rs"));
    }
    for (int k = 5; k >= 0; --k) pending[k].wait();  // any order of waiting
    pending.clear();
    for (int k = 0; k < 6; ++k) {
      pending.push_back(comm.all_gather_into_async(shards[k], gathered[k], "ag"));
    }
    for (auto& p : pending) p.wait();
    for (int k = 0; k < 6; ++k) {
      const int64_t n = 100 + 31 * k;
      at::Tensor sum = contribution(10 * k, n * c.world, at::kFloat);
      for (int r = 1; r < c.world; ++r)
        sum = sum + contribution(r + 10 * k, n * c.world, at::kFloat);
      EXPECT_TRUE(at::equal(gathered[k], sum)) << k;
    }
  });
}

std::string flat_case_name(const ::testing::TestParamInfo<FlatCase>& info) {
  return std::to_string(info.param.world) + "_ranks_" +
         (info.param.shared_memory ? "shared_memory" : "gloo");
}

INSTANTIATE_TEST_SUITE_P(Transports, FlatCollectives,
                         ::testing::Values(FlatCase{2, true}, FlatCase{3, true}, FlatCase{4, true},
                                           FlatCase{2, false}, FlatCase{3, false},
                                           FlatCase{4, false}),
                         flat_case_name);

// Through shared memory the sum is the same one the all-reduce computes, so
// a reduce-scatter followed by an all-gather equals an all-reduce bitwise on
// any number of ranks: ZeRO stages 1 and 2 can match data parallelism
// exactly.
TEST(FlatCollectivesEquivalence, ReduceScatterThenAllGatherEqualsAllReduceBitwise) {
  run_ranks(3, [](Communicator& comm) {
    const int64_t n = 123457;
    at::Tensor reduced = contribution(comm.rank(), 3 * n, at::kFloat);
    comm.all_reduce(reduced, accelerate::ReduceOp::kSum);
    at::Tensor buffer = contribution(comm.rank(), 3 * n, at::kFloat);
    at::Tensor shard = at::empty({n}, at::kFloat);
    comm.reduce_scatter_sum(buffer, shard);
    comm.all_gather_into(shard, buffer);
    EXPECT_TRUE(at::equal(buffer, reduced));
  });
}

TEST(FlatCollectivesErrors, ShapesThatDoNotTileTheBufferAreRefusedBeforeAnythingMoves) {
  run_ranks(2, [](Communicator& comm) {
    at::Tensor buffer = at::zeros({10}, at::kFloat);
    at::Tensor shard = at::zeros({4}, at::kFloat);
    try {
      comm.reduce_scatter_sum(buffer, shard);
      ADD_FAILURE() << "no error";
    } catch (const accelerate::Error& error) {
      EXPECT_THAT(error.what(), HasSubstr("reduce_scatter_sum: the buffer holds 10 elements, but "
                                          "2 shards of 4 make 8"));
    }
    at::Tensor doubles = at::zeros({5}, at::kDouble);
    EXPECT_THROW(comm.all_gather_into(doubles, buffer), accelerate::Error);
    at::Tensor strided = at::zeros({20}, at::kFloat).slice(0, 0, 20, 2);
    EXPECT_THROW(comm.all_gather_into(at::zeros({5}), strided), accelerate::Error);
    at::Tensor flags = at::zeros({4}, at::kBool), flag = at::zeros({2}, at::kBool);
    EXPECT_THROW(comm.reduce_scatter_sum(flags, flag), accelerate::Error);
    // Still in step: nothing was sent by the refused calls.
    comm.all_gather_into(at::full({5}, comm.rank(), at::kFloat), buffer);
    EXPECT_EQ(buffer[9].item<float>(), 1.0f);
  });
}

TEST(FlatCollectivesErrors, RanksDisagreeingOnTheBufferGetAnErrorNamingBoth) {
  RankOptions options;
  options.timeout = std::chrono::seconds(5);
  run_ranks(
      2,
      [](Communicator& comm) {
        const int64_t n = comm.rank() == 0 ? 8 : 9;
        at::Tensor buffer = at::zeros({2 * n}, at::kFloat), shard = at::zeros({n}, at::kFloat);
        try {
          comm.reduce_scatter_sum_async(buffer, shard, "gradient bucket 2").wait();
          ADD_FAILURE() << "no error";
        } catch (const accelerate::DistributedError& error) {
          EXPECT_THAT(error.what(), HasSubstr("gradient bucket 2: rank "));
          EXPECT_THAT(error.what(), HasSubstr("reduce-scatters shards of 8 elements of Float"));
          EXPECT_THAT(error.what(), HasSubstr("reduce-scatters shards of 9 elements of Float"));
        }
      },
      options);
}

TEST(FlatCollectivesSingleProcess, AreCopies) {
  run_ranks(1, [](Communicator& comm) {
    at::Tensor buffer = at::arange(6, at::kFloat), shard = at::zeros({6}, at::kFloat);
    comm.reduce_scatter_sum(buffer, shard);
    EXPECT_TRUE(at::equal(shard, buffer));
    at::Tensor gathered = at::zeros({6}, at::kFloat);
    comm.all_gather_into(shard, gathered);
    EXPECT_TRUE(at::equal(gathered, buffer));
  });
}

}  // namespace
