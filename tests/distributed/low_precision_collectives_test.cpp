// The low-precision forms of the flat-buffer collectives (bf16 or fp16 on
// the wire, fp32 in the tensors): each shard is the rank-ordered fp32 sum
// of the rounded contributions, the same bits through shared memory and
// Gloo; gathers deliver the rounded shards to every rank; values exact in
// the wire dtype come through as the fp32 collectives give them; and the
// bytes that travel are half of fp32's.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/distributed/communication_traffic.h"
#include "distributed/rank_contributions.h"
#include "support/thread_ranks.h"

namespace low_precision_test {

using accelerate::Communicator;
using accelerate::TrafficKind;
using accelerate::testing::contribution;
using accelerate::testing::RankOptions;
using accelerate::testing::run_ranks;
using ::testing::HasSubstr;

struct LowPrecisionCase {
  int world;
  bool shared_memory;
  at::ScalarType wire;
};

class LowPrecision : public ::testing::TestWithParam<LowPrecisionCase> {};

RankOptions options_of(const LowPrecisionCase& c) {
  RankOptions options;
  options.shared_memory_all_reduce = c.shared_memory;
  return options;
}

// Contributions rounded to the wire dtype and back, summed in rank order in fp32.
at::Tensor rounded_sum(const std::vector<at::Tensor>& buffers, at::ScalarType wire) {
  at::Tensor sum = buffers[0].to(wire).to(at::kFloat);
  for (std::size_t r = 1; r < buffers.size(); ++r) sum.add_(buffers[r].to(wire));
  return sum;
}

TEST_P(LowPrecision, ReduceScatterSumsTheRoundedValuesInRankOrderInFp32) {
  const LowPrecisionCase c = GetParam();
  for (int64_t n : {1, 7, 4099}) {
    std::vector<at::Tensor> buffers;
    for (int r = 0; r < c.world; ++r) buffers.push_back(contribution(r, n * c.world, at::kFloat));
    const at::Tensor expected = rounded_sum(buffers, c.wire);
    run_ranks(
        c.world,
        [&](Communicator& comm) {
          at::Tensor buffer = comm.reduce_scatter_buffer(n * c.world, at::kFloat);
          buffer.copy_(buffers[comm.rank()]);
          at::Tensor shard = at::empty({n});
          comm.reduce_scatter_sum_async(buffer, shard, "grads", c.wire).wait();
          EXPECT_TRUE(shard.equal(expected.narrow(0, comm.rank() * n, n)))
              << "n " << n << " rank " << comm.rank();
        },
        options_of(c));
  }
}

TEST_P(LowPrecision, AllGatherDeliversTheRoundedShardsToEveryRank) {
  const LowPrecisionCase c = GetParam();
  const int64_t n = 1001;
  std::vector<at::Tensor> shards;
  for (int r = 0; r < c.world; ++r) shards.push_back(contribution(r, n, at::kFloat));
  const at::Tensor expected = at::cat(shards).to(c.wire).to(at::kFloat);
  run_ranks(
      c.world,
      [&](Communicator& comm) {
        at::Tensor buffer = at::empty({n * c.world});
        comm.all_gather_into_async(shards[comm.rank()], buffer, "weights", c.wire).wait();
        EXPECT_TRUE(buffer.equal(expected)) << "rank " << comm.rank();
      },
      options_of(c));
}

TEST_P(LowPrecision, ValuesExactInTheWireDtypeGiveTheFp32ResultsBitwise) {
  const LowPrecisionCase c = GetParam();
  const int64_t n = 513;
  std::vector<at::Tensor> buffers;
  for (int r = 0; r < c.world; ++r) {
    // Small integers times powers of two: exact in bf16 and fp16, and their
    // sums exact in fp32, so any order gives the same bits.
    auto generator = at::make_generator<at::CPUGeneratorImpl>(7 + r);
    buffers.push_back(at::randint(-64, 64, {n * c.world}, generator).to(at::kFloat) *
                      std::ldexp(1.0, -3 * r));
  }
  run_ranks(
      c.world,
      [&](Communicator& comm) {
        at::Tensor low = buffers[comm.rank()].clone(), full = buffers[comm.rank()].clone();
        at::Tensor low_shard = at::empty({n}), full_shard = at::empty({n});
        comm.reduce_scatter_sum_async(low, low_shard, "low", c.wire).wait();
        comm.reduce_scatter_sum(full, full_shard);
        EXPECT_TRUE(low_shard.equal(full_shard)) << "rank " << comm.rank();
        // The sums need more bits than bf16 has; a contribution does not.
        const at::Tensor exact = buffers[comm.rank()].narrow(0, 0, n).clone();
        at::Tensor low_gathered = at::empty({n * c.world}),
                   full_gathered = at::empty({n * c.world});
        comm.all_gather_into_async(exact, low_gathered, "low", c.wire).wait();
        comm.all_gather_into(exact, full_gathered);
        EXPECT_TRUE(low_gathered.equal(full_gathered)) << "rank " << comm.rank();
      },
      options_of(c));
}

TEST_P(LowPrecision, AnInfiniteOrNaNContributionStaysNonFiniteInItsShard) {
  const LowPrecisionCase c = GetParam();
  const int64_t n = 16;
  run_ranks(
      c.world,
      [&](Communicator& comm) {
        at::Tensor buffer = at::ones({n * c.world});
        // The last rank overflows in the first shard, NaNs in the second.
        if (comm.rank() == c.world - 1) {
          buffer[3] = std::numeric_limits<float>::infinity();
          buffer[n + 5] = std::numeric_limits<float>::quiet_NaN();
        }
        at::Tensor shard = at::empty({n});
        comm.reduce_scatter_sum_async(buffer, shard, "grads", c.wire).wait();
        const bool finite = at::isfinite(shard).all().item<bool>();
        EXPECT_EQ(finite, comm.rank() >= 2) << "rank " << comm.rank();
      },
      options_of(c));
}

std::string case_name(const ::testing::TestParamInfo<LowPrecisionCase>& info) {
  return std::to_string(info.param.world) + "Ranks" +
         (info.param.shared_memory ? "SharedMemory" : "Gloo") +
         (info.param.wire == at::kBFloat16 ? "Bf16" : "Fp16");
}

INSTANTIATE_TEST_SUITE_P(Transports, LowPrecision,
                         ::testing::Values(LowPrecisionCase{2, true, at::kBFloat16},
                                           LowPrecisionCase{2, false, at::kBFloat16},
                                           LowPrecisionCase{3, true, at::kBFloat16},
                                           LowPrecisionCase{3, false, at::kBFloat16},
                                           LowPrecisionCase{3, false, at::kHalf}),
                         case_name);

TEST(LowPrecisionTraffic, Bf16MovesHalfTheBytesOfFp32ThroughGloo) {
  RankOptions gloo;
  gloo.shared_memory_all_reduce = false;
  run_ranks(
      2,
      [](Communicator& comm) {
        const int64_t n = 1000;
        at::Tensor buffer = at::ones({2 * n}), shard = at::empty({n});
        // Bytes this rank sent in collectives of `kind` since the last reset.
        const auto sent_in = [&](TrafficKind kind) {
          const auto traffic = comm.traffic();
          return traffic.at(0).of(kind).bytes_sent;
        };
        comm.reduce_scatter_sum(buffer, shard);
        const auto fp32_reduce = sent_in(TrafficKind::kReduceScatter);
        comm.reset_traffic();
        comm.reduce_scatter_sum_async(buffer, shard, "bf16", at::kBFloat16).wait();
        EXPECT_EQ(2 * sent_in(TrafficKind::kReduceScatter), fp32_reduce);
        comm.reset_traffic();
        comm.all_gather_into(shard, buffer);
        const auto fp32_gather = sent_in(TrafficKind::kAllGather);
        comm.reset_traffic();
        comm.all_gather_into_async(shard, buffer, "bf16", at::kBFloat16).wait();
        EXPECT_EQ(2 * sent_in(TrafficKind::kAllGather), fp32_gather);
        EXPECT_EQ(fp32_reduce, 4000u);
        EXPECT_EQ(fp32_gather, 4000u);
      },
      gloo);
}

TEST(LowPrecisionSingle, OneProcessRoundsAsAJobWould) {
  auto comm = Communicator::connect(accelerate::testing::thread_rank_job(0, 1));
  at::Tensor buffer = at::full({4}, 1.0f + 1.0f / 1024);  // not exact in bf16
  at::Tensor shard = at::empty({4});
  comm->reduce_scatter_sum_async(buffer, shard, "grads", at::kBFloat16).wait();
  EXPECT_TRUE(shard.equal(buffer.to(at::kBFloat16).to(at::kFloat)));
  at::Tensor gathered = at::empty({4});
  comm->all_gather_into_async(buffer, gathered, "weights", at::kBFloat16).wait();
  EXPECT_TRUE(gathered.equal(buffer.to(at::kBFloat16).to(at::kFloat)));
}

TEST(LowPrecisionSingle, IntegerTensorsAreRefusedInOneLine) {
  auto comm = Communicator::connect(accelerate::testing::thread_rank_job(0, 1));
  at::Tensor buffer = at::ones({4}, at::kInt), shard = at::empty({4}, at::kInt);
  try {
    comm->reduce_scatter_sum_async(buffer, shard, "ints", at::kBFloat16);
    FAIL() << "no error";
  } catch (const accelerate::Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("reduce_scatter_sum in BFloat16: Int tensors"));
  }
}

}  // namespace low_precision_test
