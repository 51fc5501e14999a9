// The reducer's gradients against the oracle: every parameter's local
// gradient all-reduced on its own with a blocking SUM and divided by the
// world size. 1, 2 and many buckets; a branch used everywhere, on rank 0 only
// or nowhere; a frozen layer; several steps through one reducer.
//
// Every case runs over Gloo and over the shared-memory all-reduce.
// Two ranks: bitwise equal (a + b is exact-order independent). Shared memory:
// bitwise equal on any number of ranks (rank-order sums). Three ranks over
// Gloo: Gloo's ring all-reduce adds each element's three contributions in an order
// that depends on where the element falls in the buffer's chunks, so a bucket
// and a lone tensor may round differently (with one parameter per bucket they
// are the same all-reduce, and bitwise equal again). What must still hold, and is
// checked, is that all ranks end bitwise equal to each other and that the
// difference from the oracle is within what reordering a float32 sum can
// cause: two orders of n terms differ by at most 2(n-1)u * sum|terms|
// (u = 2^-24), plus one rounding of the division (docs/gradient-sync.md).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <tuple>

#include "accelerate/parallel/gradient_reducer.h"
#include "parallel/parallel_test_support.h"
#include "support/thread_ranks.h"

using accelerate::Communicator;
using accelerate::GradientReducer;
using accelerate::GradientSyncOptions;
using namespace accelerate::testing;

namespace {

struct BucketCase {
  const char* name;
  double first_cap_mb;
  double cap_mb;
  int expected_buckets;
};
// 8 trainable parameters of 16..1024 floats. A 300-byte first bucket holds
// head.bias and head.weight (272 B); a near-zero cap isolates every one.
const BucketCase kOneBucket{"one_bucket", 1.0, 1.0, 1};
const BucketCase kTwoBuckets{"two_buckets", 300.0 / (1 << 20), 1.0, 2};
const BucketCase kEveryParameterAlone{"many_buckets", 1e-9, 1e-9, 8};

enum class Branch { kEverywhere, kRankZeroOnly, kNowhere };
const char* name_of(Branch b) {
  return b == Branch::kEverywhere     ? "branch_everywhere"
         : b == Branch::kRankZeroOnly ? "branch_on_rank0"
                                      : "branch_nowhere";
}
bool uses_branch(Branch b, int rank) {
  return b == Branch::kEverywhere || (b == Branch::kRankZeroOnly && rank == 0);
}

// How gradients meet the buckets: copied in and out, or as views of the
// buffers (gradient_as_bucket_view) with .grad reset between steps (LibTorch
// 2.x's zero_grad: copied in and rebound each step) or zeroed in place
// (1.13's zero_grad: backward accumulates straight into the buffer).
enum class GradStorage { kCopies, kViewsReset, kViewsZeroedInPlace };
const char* name_of(GradStorage g) {
  return g == GradStorage::kCopies       ? "copies"
         : g == GradStorage::kViewsReset ? "views_reset"
                                         : "views_zeroed";
}
void clear_grads_as(GradStorage storage, torch::nn::Module& module) {
  if (storage != GradStorage::kViewsZeroedInPlace) return clear_grads(module);
  for (auto& p : module.parameters()) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

// Readable parameter names in gtest and ctest output.
void PrintTo(const BucketCase& c, std::ostream* out) { *out << c.name; }
void PrintTo(Branch b, std::ostream* out) { *out << name_of(b); }
void PrintTo(GradStorage g, std::ostream* out) { *out << name_of(g); }

// How the ranks' sums travel: Gloo's ring over TCP, or the shared-memory
// all-reduce, which adds every element in rank order.
enum class Transport { kGloo, kSharedMemory };
const char* name_of(Transport t) { return t == Transport::kGloo ? "gloo" : "shared_memory"; }
void PrintTo(Transport t, std::ostream* out) { *out << name_of(t); }

using Case = std::tuple<int, BucketCase, Branch, GradStorage, Transport>;

class MatchesBlockingAllReduce : public ::testing::TestWithParam<Case> {};

TEST_P(MatchesBlockingAllReduce, OverSeveralSteps) {
  const int world = std::get<0>(GetParam());
  const BucketCase buckets = std::get<1>(GetParam());
  const Branch branch = std::get<2>(GetParam());
  const GradStorage storage = std::get<3>(GetParam());
  const bool views = storage != GradStorage::kCopies;
  const Transport transport = std::get<4>(GetParam());
  RankOptions rank_options;
  rank_options.shared_memory_all_reduce = transport == Transport::kSharedMemory;
  torch::set_num_threads(1);
  std::vector<int64_t> worst_ulps(world, 0);
  run_ranks(
      world,
      [&](Communicator& comm) {
        const int rank = comm.rank();
        ASSERT_EQ(comm.sums_cpu_tensors_in_shared_memory(), transport == Transport::kSharedMemory);
        BranchyNet net;
        BranchyNet reference;
        GradientReducer reducer(borrow(comm), net->parameters(),
                                GradientSyncOptions()
                                    .first_bucket_cap_mb(buckets.first_cap_mb)
                                    .bucket_cap_mb(buckets.cap_mb)
                                    .gradient_as_bucket_view(views));
        ASSERT_EQ(static_cast<int>(reducer.buckets().size()), buckets.expected_buckets);
        for (int step = 0; step < 3; ++step) {
          clear_grads_as(storage, *net);
          clear_grads(*reference);
          branchy_loss(net, rank, step, uses_branch(branch, rank)).backward();
          reducer.finalize_backward();
          branchy_loss(reference, rank, step, uses_branch(branch, rank)).backward();
          auto expected = blocking_average(comm, reference->parameters());
          auto magnitude = blocking_magnitude(comm, reference->parameters());
          auto got = net->parameters();
          for (size_t i = 0; i < got.size(); ++i) {
            SCOPED_TRACE("rank " + std::to_string(rank) + " step " + std::to_string(step) +
                         " parameter " + std::to_string(i));
            if (!expected[i].defined()) {  // the frozen layer
              EXPECT_FALSE(got[i].grad().defined());
              continue;
            }
            ASSERT_TRUE(got[i].grad().defined());
            const int64_t ulps = max_ulp_distance(got[i].grad(), expected[i]);
            worst_ulps[rank] = std::max(worst_ulps[rank], ulps);
            // A bucket holding one parameter is the per-tensor all-reduce itself;
            // shared memory adds in rank order wherever an element lies.
            const bool same_additions = world == 2 || buckets.expected_buckets == 8 ||
                                        transport == Transport::kSharedMemory;
            if (same_additions) {
              EXPECT_TRUE(torch::equal(got[i].grad(), expected[i])) << ulps << " ulps apart";
            } else {
              const double u = 1.0 / (1 << 24);
              auto bound =
                  magnitude[i].mul(2.0 * (world - 1) * u / world) + expected[i].abs().mul(u);
              auto excess =
                  (got[i].grad() - expected[i]).abs().to(torch::kDouble) - bound.to(torch::kDouble);
              EXPECT_LE(excess.max().item<double>(), 0.0) << ulps << " ulps apart";
            }
            // Whatever the order of additions, every rank holds the same bits.
            for (const auto& theirs : comm.all_gather_same_shape(got[i].grad())) {
              EXPECT_TRUE(torch::equal(theirs, got[i].grad()));
            }
          }
        }
        // With one bucket, views make every synced .grad a slice of one buffer.
        if (buckets.expected_buckets == 1) {
          const auto params = net->parameters();
          const at::Tensor& head = params.back().grad();
          for (const auto& p : params) {
            if (!p.requires_grad() || p.is_same(params.back())) continue;
            EXPECT_EQ(p.grad().is_alias_of(head), views) << "shape " << p.sizes();
          }
        }
        const auto stats = reducer.last_step_stats();
        EXPECT_EQ(stats.synced_steps, 3);
        if (branch == Branch::kEverywhere) {
          // The frozen layer holds nothing back: every bucket starts in backward.
          EXPECT_EQ(stats.buckets_launched_during_backward, stats.bucket_count);
        }
      },
      rank_options);
  std::cout << "[ measured ] world " << world << " " << buckets.name << " " << name_of(branch)
            << " " << name_of(transport) << ": largest distance from the per-tensor oracle "
            << worst_ulps[0] << " ulp\n";
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::to_string(std::get<0>(info.param)) + "_ranks_" + std::get<1>(info.param).name + "_" +
         name_of(std::get<2>(info.param)) + "_" + name_of(std::get<3>(info.param)) + "_" +
         name_of(std::get<4>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    BucketCapsAndUnusedBranches, MatchesBlockingAllReduce,
    ::testing::Combine(::testing::Values(2, 3),
                       ::testing::Values(kOneBucket, kTwoBuckets, kEveryParameterAlone),
                       ::testing::Values(Branch::kEverywhere, Branch::kRankZeroOnly,
                                         Branch::kNowhere),
                       ::testing::Values(GradStorage::kCopies, GradStorage::kViewsReset,
                                         GradStorage::kViewsZeroedInPlace),
                       ::testing::Values(Transport::kGloo, Transport::kSharedMemory)),
    case_name);

// bf16 gradients travel as float32: the oracle sums float32 copies, divides,
// and rounds to bf16 once.
TEST(LowPrecisionGradients, BFloat16ReducesThroughFloat32) {
  torch::set_num_threads(1);
  run_ranks(2, [](Communicator& comm) {
    BranchyNet net;
    net->to(torch::kBFloat16);
    GradientReducer reducer(borrow(comm), net->parameters(),
                            GradientSyncOptions().first_bucket_cap_mb(1e-9));
    EXPECT_EQ(reducer.buckets().front().wire_dtype, torch::kFloat);
    auto x = rank_data(comm.rank(), 0, {6, 8}).to(torch::kBFloat16);
    net->forward(x, true).pow(2).mean().backward();
    std::vector<torch::Tensor> local;
    for (auto& p : net->parameters())
      local.push_back(p.grad().defined() ? p.grad().clone() : p.grad());
    reducer.finalize_backward();
    auto params = net->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      if (!local[i].defined()) continue;
      auto wide = local[i].to(torch::kFloat);
      comm.all_reduce(wide, accelerate::ReduceOp::kSum);
      auto expected = wide.div_(comm.world_size()).to(torch::kBFloat16);
      EXPECT_EQ(params[i].grad().scalar_type(), torch::kBFloat16);
      EXPECT_TRUE(torch::equal(params[i].grad(), expected)) << "parameter " << i;
    }
  });
}

}  // namespace
