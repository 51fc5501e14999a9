// What every GPU test shares: the skip guards (a test that cannot run here
// says why in one line, and CTest reports it as Skipped), and ranks that are
// threads of this process, one per CUDA device, meeting through a FileStore
// and talking through NCCL (NCCL refuses two ranks on one GPU).
//
// Only device-generic ATen/c10 calls here (torch::cuda::is_available,
// c10::DeviceGuard): these tests compile against Debian's CPU-only LibTorch
// 1.13 as well as a CUDA build, and skip at run time on the former.
#pragma once

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "accelerate/distributed/communicator.h"
#include "compat/c10d_compat.h"  // compat::kHasNccl (the generated probe)
#include "support/thread_ranks.h"

namespace accelerate {
namespace testing {

// CUDA devices usable here (0 on a CPU-only LibTorch or a machine without GPU).
inline int cuda_device_count() {
  return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
}

inline c10::Device cuda_device(int index) { return c10::Device(c10::kCUDA, index); }

}  // namespace testing
}  // namespace accelerate

// GTEST_SKIP returns from the test body, so these are macros, used first
// thing in a TEST. The reasons are the ones the GPU run's script greps for.
#define ACCELERATE_GPU_REQUIRE_CUDA()                     \
  do {                                                    \
    if (::accelerate::testing::cuda_device_count() < 1) { \
      GTEST_SKIP() << "no CUDA device";                   \
    }                                                     \
  } while (0)

#define ACCELERATE_GPU_REQUIRE_NCCL()              \
  do {                                             \
    ACCELERATE_GPU_REQUIRE_CUDA();                 \
    if (!::accelerate::compat::kHasNccl) {         \
      GTEST_SKIP() << "this LibTorch has no NCCL"; \
    }                                              \
  } while (0)

#define ACCELERATE_GPU_REQUIRE_GPUS(n)                      \
  do {                                                      \
    ACCELERATE_GPU_REQUIRE_NCCL();                          \
    if (::accelerate::testing::cuda_device_count() < (n)) { \
      GTEST_SKIP() << "needs " #n " GPUs";                  \
    }                                                       \
  } while (0)

namespace accelerate {
namespace testing {

// Rank `rank` of a CUDA job whose ranks are threads: device cuda:rank and
// the NCCL backend (a one-rank job has no backend: its Communicator is the
// identity and forms no group, see Communicator::connect).
inline JobState cuda_rank_job(int rank, int world_size) {
  JobState job = thread_rank_job(rank, world_size, std::chrono::seconds(120));
  job.device.type = DeviceSpec::Type::kCUDA;
  job.device.index = rank;
  job.backend = world_size > 1 ? Backend::kNccl : Backend::kNone;
  return job;
}

// Calls body(comm) on `world_size` threads, thread r with cuda:r as its
// current device (CUDA's current device is per host thread), as
// run_rank_communicators does for Gloo ranks: a failed EXPECT in any thread
// fails the test, and an exception escaping a rank is reported with its rank.
inline void run_cuda_ranks(int world_size,
                           const std::function<void(std::shared_ptr<Communicator>)>& body) {
  run_ranks_of_jobs(
      world_size,
      [&](int rank) {
        // The thread's current device from before it connects to the end
        // (the thread ends with its rank).
        c10::impl::VirtualGuardImpl(c10::kCUDA).setDevice(cuda_device(rank));
        return cuda_rank_job(rank, world_size);
      },
      [&](int, std::shared_ptr<Communicator> comm) { body(std::move(comm)); });
}

// `body`'s result on each rank of a CUDA job of `world_size` threads.
template <class Result>
std::vector<Result> on_each_cuda_rank(
    int world_size, const std::function<Result(std::shared_ptr<Communicator>)>& body) {
  std::vector<Result> results(world_size);
  run_cuda_ranks(world_size, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    results[rank] = body(std::move(comm));
  });
  return results;
}

// Host copies, for comparisons (NaN-aware where asked).
inline std::vector<at::Tensor> to_host(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> host;
  for (const auto& t : tensors) host.push_back(t.defined() ? t.detach().cpu() : t);
  return host;
}

// Bitwise equality that also holds where both sides are NaN at the same place.
inline bool same_values(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  const at::Tensor x = a.cpu(), y = b.cpu();
  if (!at::equal(at::isnan(x), at::isnan(y))) return false;
  const auto no_nan = [](const at::Tensor& t) {
    return at::where(at::isnan(t), at::zeros_like(t), t);
  };
  return at::equal(no_nan(x), no_nan(y));
}

}  // namespace testing
}  // namespace accelerate
