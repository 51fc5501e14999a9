// NCCL through our Communicator: CUDA tensors on ranks that are threads, one
// per GPU (world = every visible device), checked against exact sums and
// gathers computed on the host. The values are small integers in float, so
// every sum is exact in any order NCCL's rings or trees choose: equality is
// bitwise.
//
// A one-GPU machine still runs NCCL: a one-rank Communicator forms no group
// (its collectives are the identity, checked too), so the one-rank NCCL
// process group is built here through the same compat::make_nccl the
// Communicator uses, and the same four calls the library makes on it
// (allreduce, allgather, _reduce_scatter_base, _allgather_base) are checked.
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu/gpu_test_support.h"

namespace gpu_nccl_communicator_test {

using accelerate::Communicator;
using accelerate::ReduceOp;
using namespace accelerate::testing;

// Rank r's contribution: (r + 1) * [0, 1, ..., n-1], exact in float/bf16
// for the sizes used here.
at::Tensor contribution_of(int rank, int64_t n, at::ScalarType dtype, c10::Device device) {
  return at::arange(n, at::TensorOptions().dtype(at::kFloat)).mul(rank + 1).to(device, dtype);
}

// sum over r of (r + 1) = W (W + 1) / 2.
double rank_weight_sum(int world) { return world * (world + 1) / 2.0; }

TEST(NcclCommunicator, AllReduceSumsMeanMaxAndBf16OnEveryGpu) {
  ACCELERATE_GPU_REQUIRE_NCCL();
  const int world = cuda_device_count();
  run_cuda_ranks(world, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    const c10::Device device = cuda_device(rank);
    const int64_t n = 1000;
    EXPECT_TRUE(comm->reduces_natively(at::kBFloat16, device)) << "NCCL sums bf16 itself";
    const at::Tensor base = at::arange(n, at::kFloat);

    at::Tensor sum = contribution_of(rank, n, at::kFloat, device);
    comm->all_reduce(sum, ReduceOp::kSum);
    EXPECT_EQ(sum.device(), device) << "the result stays on the rank's GPU";
    EXPECT_TRUE(at::equal(sum.cpu(), base * rank_weight_sum(world)));

    at::Tensor mean = contribution_of(rank, n, at::kFloat, device);
    comm->all_reduce(mean, ReduceOp::kMean);
    EXPECT_TRUE(at::allclose(mean.cpu(), base * (rank_weight_sum(world) / world)));

    at::Tensor max = contribution_of(rank, n, at::kFloat, device);
    comm->all_reduce(max, ReduceOp::kMax);
    EXPECT_TRUE(at::equal(max.cpu(), base * world));

    // 64 * 6 = 384 at most (8 GPUs: 64 * 36 = 2304): integers bf16 holds.
    at::Tensor bf16 = contribution_of(rank, 64, at::kBFloat16, device);
    comm->all_reduce(bf16, ReduceOp::kSum);
    EXPECT_EQ(bf16.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(
        at::equal(bf16.cpu().to(at::kFloat), at::arange(64, at::kFloat) * rank_weight_sum(world)));

    // The reducer's asynchronous form.
    at::Tensor async = contribution_of(rank, n, at::kFloat, device);
    comm->all_reduce_sum_async(async, "gpu test bucket").wait();
    EXPECT_TRUE(at::equal(async.cpu(), base * rank_weight_sum(world)));
  });
}

TEST(NcclCommunicator, ReduceScatterAndAllGatherOfFlatBuffers) {
  ACCELERATE_GPU_REQUIRE_NCCL();
  const int world = cuda_device_count();
  run_cuda_ranks(world, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    const c10::Device device = cuda_device(rank);
    const int64_t shard_numel = 257;  // odd: no alignment luck
    const int64_t numel = shard_numel * world;
    // Rank r's buffer: (r + 1) * [0, numel); shard k of the sum holds
    // W(W+1)/2 * [k*n, (k+1)*n).
    const at::Tensor buffer = contribution_of(rank, numel, at::kFloat, device);
    at::Tensor shard = at::full({shard_numel}, -1.0f, at::TensorOptions().device(device));
    comm->reduce_scatter_sum(buffer, shard);
    const at::Tensor expected_shard =
        at::arange(rank * shard_numel, (rank + 1) * shard_numel, at::kFloat) *
        rank_weight_sum(world);
    EXPECT_TRUE(at::equal(shard.cpu(), expected_shard)) << "rank " << rank;

    // The same with the shard a view of the buffer (how ZeRO calls it).
    at::Tensor in_place = contribution_of(rank, numel, at::kFloat, device);
    at::Tensor own = in_place.narrow(0, rank * shard_numel, shard_numel);
    comm->reduce_scatter_sum_async(in_place, own, "in place").wait();
    EXPECT_TRUE(at::equal(own.cpu(), expected_shard)) << "rank " << rank;

    // All-gather: shard r of the result is rank r's shard; any dtype (int64).
    const at::Tensor mine = at::full({shard_numel}, int64_t{100} + rank,
                                     at::TensorOptions().dtype(at::kLong).device(device));
    at::Tensor gathered = at::zeros({numel}, mine.options());
    comm->all_gather_into(mine, gathered);
    std::vector<at::Tensor> rows;
    for (int r = 0; r < world; ++r)
      rows.push_back(at::full({shard_numel}, int64_t{100} + r, at::kLong));
    EXPECT_TRUE(at::equal(gathered.cpu(), at::cat(rows)));

    at::Tensor gathered_async = at::zeros({numel}, mine.options());
    comm->all_gather_into_async(mine, gathered_async, "gather").wait();
    EXPECT_TRUE(at::equal(gathered_async.cpu(), at::cat(rows)));
  });
}

TEST(NcclCommunicator, GathersAndBroadcastsTensorsOfAnyShape) {
  ACCELERATE_GPU_REQUIRE_NCCL();
  const int world = cuda_device_count();
  run_cuda_ranks(world, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    const c10::Device device = cuda_device(rank);
    const at::Tensor mine =
        at::arange(6, at::kFloat).reshape({2, 3}).add(10 * rank).to(device, at::kHalf);
    const std::vector<at::Tensor> all = comm->all_gather_same_shape(mine);
    ASSERT_EQ(static_cast<int>(all.size()), world);
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(all[r].device(), device);
      EXPECT_EQ(all[r].scalar_type(), at::kHalf);
      EXPECT_TRUE(at::equal(all[r].cpu(),
                            at::arange(6, at::kFloat).reshape({2, 3}).add(10 * r).to(at::kHalf)));
    }
    at::Tensor value = at::full({5}, static_cast<float>(rank), at::TensorOptions().device(device));
    comm->broadcast(value, world - 1);
    EXPECT_TRUE(at::equal(value.cpu(), at::full({5}, static_cast<float>(world - 1))));
    comm->barrier();
  });
}

// NCCL's own group of one rank on GPU 0: initialisation and the identity
// results of each call the Communicator makes on it.
TEST(NcclCommunicator, OneRankNcclGroupInitialisesAndReturnsItsInput) {
  ACCELERATE_GPU_REQUIRE_NCCL();
  c10::DeviceGuard on_device(cuda_device(0));
  const std::string path = fresh_store_path();
  auto store = c10::make_intrusive<c10d::FileStore>(path, 1);
  auto nccl = accelerate::compat::make_nccl(store, 0, 1, std::chrono::seconds(120));
  ASSERT_TRUE(nccl) << "compat::make_nccl gave no group on a build whose probe found NCCL";
  const auto on_gpu = at::TensorOptions().device(cuda_device(0));
  const at::Tensor values = at::arange(100, at::kFloat).to(cuda_device(0));

  std::vector<at::Tensor> reduced{values.clone()};
  nccl->allreduce(reduced, c10d::AllreduceOptions())->wait();
  EXPECT_TRUE(at::equal(reduced[0].cpu(), values.cpu()));

  at::Tensor shard = at::zeros({100}, on_gpu);
  at::Tensor input = values.clone();
  c10d::ReduceScatterOptions scatter;
  scatter.reduceOp = c10d::ReduceOp::SUM;
  nccl->_reduce_scatter_base(shard, input, scatter)->wait();
  EXPECT_TRUE(at::equal(shard.cpu(), values.cpu()));

  at::Tensor gathered = at::zeros({100}, on_gpu);
  at::Tensor source = values.clone();
  nccl->_allgather_base(gathered, source, c10d::AllgatherOptions())->wait();
  EXPECT_TRUE(at::equal(gathered.cpu(), values.cpu()));

  std::vector<std::vector<at::Tensor>> outputs{{at::zeros({100}, on_gpu)}};
  std::vector<at::Tensor> inputs{values.clone()};
  nccl->allgather(outputs, inputs)->wait();
  EXPECT_TRUE(at::equal(outputs[0][0].cpu(), values.cpu()));
  accelerate::compat::shutdown(*nccl);  // as the Communicator does (nccl_shutdown_test)
  nccl.reset();
  ::unlink(path.c_str());
}

// A one-rank CUDA job: no group at all, every collective the identity, and
// the tensors stay on the GPU.
TEST(NcclCommunicator, OneRankCudaJobCollectivesAreTheIdentity) {
  ACCELERATE_GPU_REQUIRE_CUDA();
  run_cuda_ranks(1, [](std::shared_ptr<Communicator> comm) {
    const c10::Device device = cuda_device(0);
    const at::Tensor values = at::arange(64, at::kFloat).to(device);
    at::Tensor sum = values.clone();
    comm->all_reduce(sum, ReduceOp::kSum);
    EXPECT_EQ(sum.device(), device);
    EXPECT_TRUE(at::equal(sum.cpu(), values.cpu()));
    at::Tensor shard = at::zeros({64}, values.options());
    comm->reduce_scatter_sum(values, shard);
    EXPECT_TRUE(at::equal(shard.cpu(), values.cpu()));
    at::Tensor gathered = at::zeros({64}, values.options());
    comm->all_gather_into(values, gathered);
    EXPECT_TRUE(at::equal(gathered.cpu(), values.cpu()));
  });
}

}  // namespace gpu_nccl_communicator_test
