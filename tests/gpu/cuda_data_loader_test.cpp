// DataLoader pin_memory and device placement with a GPU: collated batches
// land in page-locked host memory (so the copy to the GPU can be
// asynchronous), and with a device set they arrive on it holding the values
// the dataset produced. Example i is (data [i, i], target i)
// (tests/data/test_datasets.h). Without a GPU pinning is a no-op, which the
// CPU data tests cover.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/data/data_loader.h"
#include "accelerate/data/data_transfer.h"
#include "data/test_datasets.h"
#include "gpu/gpu_test_support.h"

namespace gpu_cuda_data_loader_test {

using accelerate::DataLoader;
using accelerate::DataLoaderOptions;
using accelerate::testing::cuda_device;
using accelerate::testing::IndexDataset;

// The batch of examples [first, first + count) as collate builds it, on the CPU.
std::pair<at::Tensor, at::Tensor> expected_batch(int64_t first, int64_t count) {
  const at::Tensor targets = at::arange(first, first + count, at::kLong);
  return {targets.to(at::kFloat).unsqueeze(1).expand({count, 2}).contiguous(), targets};
}

TEST(CudaDataTransfer, PinMemoryAndSendToDeviceReachEveryTensorOfABatch) {
  ACCELERATE_GPU_REQUIRE_CUDA();
  EXPECT_TRUE(accelerate::can_pin_memory());
  const at::Tensor a = at::arange(12, at::kFloat).reshape({3, 4});
  const at::Tensor b = at::arange(3, at::kLong);
  const std::tuple<at::Tensor, std::vector<at::Tensor>> batch{a, {b, a * 2}};
  const auto pinned = accelerate::pin_memory(batch);
  EXPECT_FALSE(a.is_pinned()) << "pin_memory copies; the input stays as it was";
  EXPECT_TRUE(std::get<0>(pinned).is_pinned());
  EXPECT_TRUE(std::get<1>(pinned)[0].is_pinned());
  EXPECT_TRUE(std::get<1>(pinned)[1].is_pinned());
  const auto moved = accelerate::send_to_device(pinned, cuda_device(0), /*non_blocking=*/true);
  EXPECT_EQ(std::get<0>(moved).device(), cuda_device(0));
  EXPECT_EQ(std::get<1>(moved)[0].device(), cuda_device(0));
  // .cpu() waits for the non-blocking copies on the current stream.
  EXPECT_TRUE(at::equal(std::get<0>(moved).cpu(), a));
  EXPECT_TRUE(at::equal(std::get<1>(moved)[0].cpu(), b));
  EXPECT_TRUE(at::equal(std::get<1>(moved)[1].cpu(), a * 2));
}

TEST(CudaDataLoader, PinMemoryYieldsPinnedBatchesWithAndWithoutWorkers) {
  ACCELERATE_GPU_REQUIRE_CUDA();
  for (size_t workers : {size_t{0}, size_t{2}}) {
    SCOPED_TRACE("num_workers " + std::to_string(workers));
    DataLoader loader(IndexDataset(10), DataLoaderOptions(4).pin_memory(true).num_workers(workers));
    int64_t first = 0;
    for (auto& batch : loader) {
      EXPECT_TRUE(batch.data.is_pinned()) << "batch at " << first;
      EXPECT_TRUE(batch.target.is_pinned()) << "batch at " << first;
      const auto expected = expected_batch(first, batch.target.size(0));
      EXPECT_TRUE(at::equal(batch.data, expected.first));
      EXPECT_TRUE(at::equal(batch.target, expected.second));
      first += batch.target.size(0);
    }
    EXPECT_EQ(first, 10);
    // Without pin_memory nothing is pinned (the option is what pins).
    DataLoader plain(IndexDataset(4), DataLoaderOptions(4).num_workers(workers));
    for (auto& batch : plain) EXPECT_FALSE(batch.data.is_pinned());
  }
}

TEST(CudaDataLoader, BatchesArriveOnTheDeviceWithTheDatasetsValues) {
  ACCELERATE_GPU_REQUIRE_CUDA();
  for (bool pin : {true, false}) {
    SCOPED_TRACE(pin ? "pinned" : "pageable");
    DataLoader loader(IndexDataset(10), DataLoaderOptions(4).pin_memory(pin).num_workers(2));
    loader.set_device(cuda_device(0));
    int64_t first = 0;
    for (auto& batch : loader) {
      EXPECT_EQ(batch.data.device(), cuda_device(0));
      EXPECT_EQ(batch.target.device(), cuda_device(0));
      const auto expected = expected_batch(first, batch.target.size(0));
      EXPECT_TRUE(at::equal(batch.data.cpu(), expected.first));
      EXPECT_TRUE(at::equal(batch.target.cpu(), expected.second));
      first += batch.target.size(0);
    }
    EXPECT_EQ(first, 10);
  }
}

// Through the Accelerator of a one-GPU job: prepare() sets the loader's
// device to the job's GPU.
TEST(CudaDataLoader, AcceleratorPreparedLoaderYieldsGpuBatches) {
  ACCELERATE_GPU_REQUIRE_CUDA();
  c10::DeviceGuard on_device(cuda_device(0));
  accelerate::Accelerator accelerator(
      accelerate::Communicator::connect(accelerate::testing::cuda_rank_job(0, 1)));
  DataLoader loader(IndexDataset(6), DataLoaderOptions(3).pin_memory(true));
  accelerator.prepare(loader);
  ASSERT_TRUE(loader.device().has_value());
  EXPECT_EQ(*loader.device(), cuda_device(0));
  int64_t first = 0;
  for (auto& batch : loader) {
    EXPECT_EQ(batch.data.device(), cuda_device(0));
    EXPECT_TRUE(at::equal(batch.target.cpu(), expected_batch(first, 3).second));
    first += 3;
  }
  EXPECT_EQ(first, 6);
}

}  // namespace gpu_cuda_data_loader_test
