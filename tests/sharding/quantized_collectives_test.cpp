// ZeRO++'s quantized collectives (sharding/quantized_collectives.h) on
// thread ranks: qwZ's gather gives every rank each owner's shard quantized
// and dequantized (its own too), qgZ's reduce-scatter the rank-ordered fp32
// sum of the dequantized rows, bitwise against the same arithmetic done
// locally with the quantizer; a NaN block reaches the shard's owner; and
// the bytes counted are the wire format's, about a quarter (int8) and an
// eighth (int4) of fp32's.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "accelerate/distributed/communication_traffic.h"
#include "quantize/block_quantize.h"
#include "sharding/quantized_collectives.h"
#include "support/thread_ranks.h"

namespace quantized_collectives_test {

using accelerate::Communicator;
using accelerate::TrafficKind;
using accelerate::quantize::QuantBits;
using accelerate::sharding::QuantizedWire;
using accelerate::testing::RankOptions;
using accelerate::testing::run_ranks;
using ::testing::HasSubstr;

// Rank r's values: normal, with magnitudes spread over a few decades.
at::Tensor values_of(int rank, int64_t numel) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(500 + rank);
  return at::randn({numel}, generator) * at::pow(10.0, at::randint(-2, 3, {numel}, generator));
}

// What any rank makes of `values` sent through `wire`.
at::Tensor through(const at::Tensor& values, const QuantizedWire& wire) {
  return accelerate::quantize::dequantize(
      accelerate::quantize::quantize(values, wire.bits, wire.block_size), values.numel(), wire.bits,
      wire.block_size, at::kFloat);
}

// Per element, half the quantization step of its block: the most rounding
// to the nearest step can move it (max|x| / qmax / 2).
at::Tensor half_steps(const at::Tensor& values, const QuantizedWire& wire) {
  const int64_t n = values.numel(), b = wire.block_size;
  const double qmax = wire.bits == QuantBits::kInt8 ? 127 : 7;
  at::Tensor half = at::empty({n});
  for (int64_t start = 0; start < n; start += b) {
    const int64_t len = std::min(b, n - start);
    half.narrow(0, start, len)
        .fill_(values.narrow(0, start, len).abs().max().item<double>() / qmax / 2);
  }
  return half;
}

struct QuantizedCase {
  int world;
  bool shared_memory;
  QuantBits bits;
  int64_t block_size;
};

class Quantized : public ::testing::TestWithParam<QuantizedCase> {};

TEST_P(Quantized, GatherGivesEveryRankTheDequantizedShardsBitwise) {
  const QuantizedCase c = GetParam();
  const QuantizedWire wire{c.bits, c.block_size};
  const int64_t n = 1000;  // a short last block for every block size here
  std::vector<at::Tensor> shards;
  for (int r = 0; r < c.world; ++r) shards.push_back(values_of(r, n));
  std::vector<at::Tensor> expected;
  for (const auto& shard : shards) expected.push_back(through(shard, wire));
  const at::Tensor whole = at::cat(expected);
  RankOptions options;
  options.shared_memory_all_reduce = c.shared_memory;
  run_ranks(
      c.world,
      [&](Communicator& comm) {
        at::Tensor buffer = at::empty({c.world * n});
        accelerate::sharding::quantized_all_gather(comm, shards[comm.rank()], buffer, "qwZ", wire)
            .wait();
        EXPECT_TRUE(buffer.equal(whole)) << "rank " << comm.rank();
      },
      options);
}

TEST_P(Quantized, ReduceScatterIsTheRankOrderedSumOfTheDequantizedRowsBitwise) {
  const QuantizedCase c = GetParam();
  const QuantizedWire wire{c.bits, c.block_size};
  const int64_t n = 1000;
  std::vector<at::Tensor> buffers;
  for (int r = 0; r < c.world; ++r) buffers.push_back(values_of(10 + r, c.world * n));
  std::vector<at::Tensor> expected;  // by owner
  for (int owner = 0; owner < c.world; ++owner) {
    at::Tensor sum = at::zeros({n});
    for (int r = 0; r < c.world; ++r) sum.add_(through(buffers[r].narrow(0, owner * n, n), wire));
    expected.push_back(sum);
  }
  RankOptions options;
  options.shared_memory_all_reduce = c.shared_memory;
  run_ranks(
      c.world,
      [&](Communicator& comm) {
        at::Tensor shard = at::empty({n});
        accelerate::sharding::quantized_reduce_scatter(comm, buffers[comm.rank()], shard, "qgZ",
                                                       wire)
            .wait();
        EXPECT_TRUE(shard.equal(expected[comm.rank()])) << "rank " << comm.rank();
        // And within the senders' half steps of the exact sum (plus fp32's
        // own rounding of the adds).
        at::Tensor exact = at::zeros({n}, at::kDouble), bound = at::zeros({n}, at::kDouble);
        for (const auto& b : buffers) {
          const at::Tensor row = b.narrow(0, comm.rank() * n, n);
          exact.add_(row.to(at::kDouble));
          bound.add_(half_steps(row, wire).to(at::kDouble));
        }
        bound = bound * (1 + 1e-6) + exact.abs() * 1e-6;
        EXPECT_TRUE(((shard.to(at::kDouble) - exact).abs() <= bound).all().item<bool>())
            << "rank " << comm.rank();
      },
      options);
}

std::string case_name(const ::testing::TestParamInfo<QuantizedCase>& info) {
  return std::to_string(info.param.world) + "Ranks" +
         (info.param.shared_memory ? "SharedMemory" : "Gloo") +
         (info.param.bits == QuantBits::kInt8 ? "Int8" : "Int4") + "Block" +
         std::to_string(info.param.block_size);
}

INSTANTIATE_TEST_SUITE_P(Wires, Quantized,
                         ::testing::Values(QuantizedCase{2, true, QuantBits::kInt8, 256},
                                           QuantizedCase{2, false, QuantBits::kInt4, 64},
                                           QuantizedCase{3, true, QuantBits::kInt4, 4096},
                                           QuantizedCase{3, false, QuantBits::kInt8, 128}),
                         case_name);

TEST(QuantizedCollectives, ANaNBlockReachesTheOwnerOfItsShard) {
  run_ranks(2, [](Communicator& comm) {
    at::Tensor buffer = at::ones({2 * 64});
    if (comm.rank() == 1) buffer[3] = std::numeric_limits<float>::quiet_NaN();      // rank 0's row
    if (comm.rank() == 0) buffer[64 + 7] = std::numeric_limits<float>::infinity();  // rank 1's
    at::Tensor shard = at::empty({64});
    accelerate::sharding::quantized_reduce_scatter(comm, buffer, shard, "qgZ",
                                                   {QuantBits::kInt4, 32})
        .wait();
    // The block holding the bad value comes back NaN, the other block of the row finite.
    const int bad = comm.rank() == 0 ? 3 : 7;
    EXPECT_TRUE(std::isnan(shard[bad].item<float>())) << "rank " << comm.rank();
    EXPECT_TRUE(at::isfinite(shard.narrow(0, 32, 32)).all().item<bool>());
  });
}

TEST(QuantizedCollectives, TheBytesCountedAreTheWireFormats) {
  RankOptions gloo;
  gloo.shared_memory_all_reduce = false;
  run_ranks(
      2,
      [](Communicator& comm) {
        const int64_t n = 8192;
        at::Tensor buffer = values_of(comm.rank(), 2 * n), shard = at::empty({n});
        const auto sent = [&](TrafficKind kind) {
          return comm.traffic().at(0).of(kind).bytes_sent;
        };
        comm.reduce_scatter_sum(buffer, shard);
        comm.all_gather_into(shard, buffer);
        const auto fp32 = sent(TrafficKind::kReduceScatter) + sent(TrafficKind::kAllGather);
        comm.reset_traffic();
        accelerate::sharding::quantized_reduce_scatter(comm, buffer, shard, "qgZ",
                                                       {QuantBits::kInt4, 4096})
            .wait();
        accelerate::sharding::quantized_all_gather(comm, shard, buffer, "qwZ",
                                                   {QuantBits::kInt8, 4096})
            .wait();
        // One peer: int4 = 2 scales + 4096 bytes; int8 = 2 scales + 8192 bytes.
        EXPECT_EQ(sent(TrafficKind::kAllToAll), 8u + 4096u);
        EXPECT_EQ(sent(TrafficKind::kAllGather), 8u + 8192u);
        EXPECT_EQ(fp32, 2u * 4 * 8192);
        const double ratio =
            double(sent(TrafficKind::kAllToAll) + sent(TrafficKind::kAllGather)) / double(fp32);
        EXPECT_LT(ratio, 0.3);  // the goal for qwZ + qgZ, scales included
      },
      gloo);
}

TEST(QuantizedCollectives, OneProcessRoundTripsItsOwnValues) {
  auto comm = Communicator::connect(accelerate::testing::thread_rank_job(0, 1));
  const at::Tensor values = values_of(0, 300);
  at::Tensor shard = at::empty({300}), gathered = at::empty({300});
  accelerate::sharding::quantized_reduce_scatter(*comm, values, shard, "qgZ", {}).wait();
  EXPECT_TRUE(shard.equal(through(values, {})));
  accelerate::sharding::quantized_all_gather(*comm, values, gathered, "qwZ", {}).wait();
  EXPECT_TRUE(gathered.equal(through(values, {})));
}

TEST(QuantizedCollectives, BadTensorsAreOneLineErrors) {
  auto comm = Communicator::connect(accelerate::testing::thread_rank_job(0, 1));
  at::Tensor ints = at::ones({8}, at::kInt), shard = at::empty({8}, at::kInt);
  try {
    accelerate::sharding::quantized_reduce_scatter(*comm, ints, shard, "qgZ", {});
    FAIL() << "no error";
  } catch (const accelerate::Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("quantizes floating-point tensors, not Int"));
  }
}

}  // namespace quantized_collectives_test
