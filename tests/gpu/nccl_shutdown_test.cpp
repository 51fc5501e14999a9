// NCCL groups are shut down before they are destroyed, as Python's
// destroy_process_group does. LibTorch 2.x's ProcessGroupNCCL otherwise
// prints "destroy_process_group() was not called before program exit" when
// it is destroyed (seen in the first GPU run, docs/gpu.md), once per
// process: every user's job would end with that warning.
//
// Each check runs in a fresh process (a "threadsafe" death test re-executes
// this binary for the one test), since the warning is printed once per
// process and an earlier test could have spent it. A control child that
// skips the shutdown shows the warning is observable on this LibTorch; where
// it is not (a LibTorch that does not warn), there is nothing to check.
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gpu/gpu_test_support.h"

namespace gpu_nccl_shutdown_test {

using accelerate::Communicator;
using accelerate::ReduceOp;
using namespace accelerate::testing;

constexpr char kLeakWarning[] = "destroy_process_group";

class NcclShutdown : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// A one-rank NCCL group that ran a collective (NCCL makes its communicator
// at the first one), destroyed with or without compat::shutdown; exits 0.
void one_rank_group_then_exit(bool shut_down) {
  c10::DeviceGuard on_device(cuda_device(0));
  auto store = c10::make_intrusive<c10d::FileStore>(fresh_store_path(), 1);
  auto nccl = accelerate::compat::make_nccl(store, 0, 1, std::chrono::seconds(120));
  std::vector<at::Tensor> values{at::ones({16}, at::TensorOptions().device(cuda_device(0)))};
  nccl->allreduce(values)->wait();
  if (shut_down) accelerate::compat::shutdown(*nccl);
  nccl.reset();
  std::exit(0);
}

bool warns_without_shutdown() {
  bool warned = false;
  EXPECT_EXIT(one_rank_group_then_exit(false), ::testing::ExitedWithCode(0),
              ::testing::Truly([&](const std::string& err) {
                warned = err.find(kLeakWarning) != std::string::npos;
                return true;
              }));
  return warned;
}

TEST_F(NcclShutdown, ShutDownGroupIsDestroyedWithoutTheLeakWarning) {
  ACCELERATE_GPU_REQUIRE_NCCL();
  if (!warns_without_shutdown()) {
    GTEST_SKIP() << "this LibTorch does not warn about NCCL groups never shut down";
  }
  EXPECT_EXIT(one_rank_group_then_exit(true), ::testing::ExitedWithCode(0),
              ::testing::Not(::testing::HasSubstr(kLeakWarning)));
}

// The Communicator's own NCCL group (jobs of 2+ GPUs) goes the same way
// when the communicator is destroyed.
TEST_F(NcclShutdown, CommunicatorShutsItsNcclGroupDown) {
  ACCELERATE_GPU_REQUIRE_GPUS(2);
  if (!warns_without_shutdown()) {
    GTEST_SKIP() << "this LibTorch does not warn about NCCL groups never shut down";
  }
  EXPECT_EXIT(
      {
        run_cuda_ranks(cuda_device_count(), [](std::shared_ptr<Communicator> comm) {
          at::Tensor values = at::ones({16}, at::TensorOptions().device(cuda_device(comm->rank())));
          comm->all_reduce(values, ReduceOp::kSum);
        });
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), ::testing::Not(::testing::HasSubstr(kLeakWarning)));
}

}  // namespace gpu_nccl_shutdown_test
