// The GradientReducer with CUDA parameters: buckets live on each rank's GPU
// and are all-reduced over NCCL while backward runs. The oracle is a single
// process's computation: every rank's local gradients (from an identical
// model on the same GPU, without a reducer) gathered and averaged on the
// host in rank order. With 2 ranks a + b is the same in any order, so the
// reducer must match bitwise (as the CPU tests assert for 2 ranks); with more,
// NCCL adds in its ring's (or tree's) order, not rank order, so the
// difference must stay within what reordering a float32 sum can cause
// (tests/parallel/gradient_equivalence_test.cpp has the bound).
// World = every visible GPU; one GPU leaves nothing to synchronise, and the
// test skips.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "accelerate/parallel/gradient_reducer.h"
#include "gpu/gpu_test_support.h"
#include "parallel/parallel_test_support.h"

namespace gpu_cuda_reducer_test {

using accelerate::CommHook;
using accelerate::Communicator;
using accelerate::GradientReducer;
using accelerate::GradientSyncOptions;
using namespace accelerate::testing;

// BranchyNet's loss on rank `rank`'s data for `step`, on the model's GPU.
torch::Tensor loss_on(BranchyNet& net, const c10::Device& device, int rank, int step,
                      bool use_branch) {
  auto x = rank_data(rank, step, {6, 8}).to(device);
  auto target = rank_data(rank, 100 + step, {6, 4}).to(device);
  return (net->forward(x, use_branch) - target).pow(2).mean();
}

// Per trainable parameter: the rank-order host sum of every rank's local
// gradient (zero where a rank had none), and the sum of their magnitudes.
struct Oracle {
  std::vector<at::Tensor> average;    // undefined for frozen parameters
  std::vector<at::Tensor> magnitude;  // sum over ranks of |local gradient|
};

Oracle gather_oracle(Communicator& comm, const std::vector<at::Tensor>& local_params) {
  Oracle oracle;
  for (const auto& p : local_params) {
    if (!p.requires_grad()) {
      oracle.average.emplace_back();
      oracle.magnitude.emplace_back();
      continue;
    }
    const at::Tensor local = p.grad().defined() ? p.grad().detach() : at::zeros_like(p);
    const std::vector<at::Tensor> all = comm.all_gather_same_shape(local);
    at::Tensor sum = all[0].cpu().clone(), magnitude = all[0].cpu().abs();
    for (std::size_t r = 1; r < all.size(); ++r) {
      sum.add_(all[r].cpu());
      magnitude.add_(all[r].cpu().abs());
    }
    oracle.average.push_back(sum.div_(comm.world_size()));
    oracle.magnitude.push_back(magnitude);
  }
  return oracle;
}

struct Layout {
  const char* name;
  double first_cap_mb;
  double cap_mb;
};
// 8 trainable parameters: all in one bucket, or each alone.
const Layout kOneBucket{"one_bucket", 1.0, 1.0};
const Layout kEveryParameterAlone{"many_buckets", 1e-9, 1e-9};
void PrintTo(const Layout& layout, std::ostream* out) { *out << layout.name; }

using Case = std::tuple<Layout, bool /*gradient_as_bucket_view*/, bool /*branch on rank 0 only*/>;
class CudaReducer : public ::testing::TestWithParam<Case> {};

TEST_P(CudaReducer, GradientsEqualTheSingleProcessAverage) {
  ACCELERATE_GPU_REQUIRE_GPUS(2);
  const int world = cuda_device_count();
  const Layout layout = std::get<0>(GetParam());
  const bool views = std::get<1>(GetParam());
  const bool branch_on_rank0_only = std::get<2>(GetParam());
  run_cuda_ranks(world, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    const c10::Device device = cuda_device(rank);
    BranchyNet net, reference;
    net->to(device);
    reference->to(device);
    GradientReducer reducer(comm, net->parameters(),
                            GradientSyncOptions()
                                .first_bucket_cap_mb(layout.first_cap_mb)
                                .bucket_cap_mb(layout.cap_mb)
                                .gradient_as_bucket_view(views));
    for (const auto& bucket : reducer.buckets()) {
      EXPECT_EQ(bucket.device, device) << "a bucket of CUDA gradients must stay on the GPU";
    }
    for (int step = 0; step < 3; ++step) {
      clear_grads(*net);
      clear_grads(*reference);
      const bool branch = !branch_on_rank0_only || rank == 0;
      loss_on(net, device, rank, step, branch).backward();
      reducer.finalize_backward();
      loss_on(reference, device, rank, step, branch).backward();
      const Oracle oracle = gather_oracle(*comm, reference->parameters());
      const auto got = net->parameters();
      for (std::size_t i = 0; i < got.size(); ++i) {
        SCOPED_TRACE("rank " + std::to_string(rank) + " step " + std::to_string(step) +
                     " parameter " + std::to_string(i));
        if (!oracle.average[i].defined()) {
          EXPECT_FALSE(got[i].grad().defined()) << "the frozen layer got a gradient";
          continue;
        }
        ASSERT_TRUE(got[i].grad().defined());
        EXPECT_EQ(got[i].grad().device(), device);
        const at::Tensor grad = got[i].grad().cpu();
        if (world == 2) {
          EXPECT_TRUE(at::equal(grad, oracle.average[i]))
              << max_ulp_distance(grad, oracle.average[i]) << " ulps apart";
        } else {
          const double u = 1.0 / (1 << 24);
          auto bound = oracle.magnitude[i].mul(2.0 * (world - 1) * u / world) +
                       oracle.average[i].abs().mul(u);
          auto excess = (grad - oracle.average[i]).abs().to(at::kDouble) - bound.to(at::kDouble);
          EXPECT_LE(excess.max().item<double>(), 0.0);
        }
      }
    }
    EXPECT_GT(reducer.last_step_stats().synced_steps, 0);
  });
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaReducer,
                         ::testing::Combine(::testing::Values(kOneBucket, kEveryParameterAlone),
                                            ::testing::Bool(), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(std::get<0>(info.param).name) +
                                  (std::get<1>(info.param) ? "_views" : "_copies") +
                                  (std::get<2>(info.param) ? "_branch_on_rank0"
                                                           : "_branch_everywhere");
                         });

// DDP's compression hooks on NCCL: bf16 needs a backend that sums bf16, which
// only NCCL is (Gloo refuses it). Each rank divides by W and rounds to the
// wire dtype, the sum is rounded once per hop: within 2^-p of the summed
// magnitudes, with p the wire dtype's significand bits (8 bf16, 11 fp16),
// times a margin of 2.
TEST(CudaReducerCompression, Bf16AndFp16HooksTravelCompressedWithinTheirPrecision) {
  ACCELERATE_GPU_REQUIRE_GPUS(2);
  const int world = cuda_device_count();
  for (CommHook hook : {CommHook::kBf16, CommHook::kFp16}) {
    const bool bf16 = hook == CommHook::kBf16;
    SCOPED_TRACE(bf16 ? "bf16 hook" : "fp16 hook");
    run_cuda_ranks(world, [&](std::shared_ptr<Communicator> comm) {
      const int rank = comm->rank();
      const c10::Device device = cuda_device(rank);
      BranchyNet net, reference;
      net->to(device);
      reference->to(device);
      GradientReducer reducer(comm, net->parameters(), GradientSyncOptions().comm_hook(hook));
      for (const auto& bucket : reducer.buckets()) {
        EXPECT_TRUE(bucket.compressed);
        EXPECT_EQ(bucket.wire_dtype, bf16 ? at::kBFloat16 : at::kHalf);
        EXPECT_EQ(bucket.device, device);
      }
      loss_on(net, device, rank, 0, true).backward();
      reducer.finalize_backward();
      loss_on(reference, device, rank, 0, true).backward();
      const Oracle oracle = gather_oracle(*comm, reference->parameters());
      const double precision = bf16 ? 1.0 / 256 : 1.0 / 2048;
      // fp16 has float's precision but not its range: a share below 2^-14
      // is subnormal, spaced 2^-24 apart, whatever its size.
      const double subnormal_slack = bf16 ? 0.0 : world * std::ldexp(1.0, -24);
      const auto got = net->parameters();
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (!oracle.average[i].defined()) continue;
        SCOPED_TRACE("rank " + std::to_string(rank) + " parameter " + std::to_string(i));
        const at::Tensor grad = got[i].grad().cpu();
        EXPECT_EQ(grad.scalar_type(), at::kFloat) << "gradients come back in their own dtype";
        auto excess = (grad - oracle.average[i]).abs() - oracle.magnitude[i].mul(2 * precision);
        EXPECT_LE(excess.max().item<double>(), subnormal_slack);
      }
    });
  }
}

}  // namespace gpu_cuda_reducer_test
