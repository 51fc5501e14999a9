// The GradScaler's CUDA path (LibTorch's fused kernels
// _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_) against
// its portable path (basic ops, chosen for every non-CUDA tensor): the same
// problem trained side by side, one copy on the GPU and one on the CPU, over
// steps with inf and NaN gradients, backoff, growth, and a growth that would
// overflow. After every step both must agree exactly: scale, growth tracker,
// step taken or skipped, the unscaled gradients (inf/NaN in the same
// places), and the parameters. The arithmetic is the same on both devices
// (one float multiply per element; scales are powers of two), so equality is
// bitwise.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "accelerate/precision/grad_scaler.h"
#include "gpu/gpu_test_support.h"

namespace gpu_cuda_grad_scaler_test {

using accelerate::GradScaler;
using accelerate::GradScalerOptions;
using accelerate::testing::cuda_device;
using accelerate::testing::same_values;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// Two parameters trained with SGD(lr 0.5) on `device`; a step's loss is
// sum(w1 * c1) + sum(w2 * c2), so the true gradients are the coefficients.
struct Problem {
  explicit Problem(const c10::Device& device)
      : device(device),
        w1(torch::tensor({1.0f, -2.0f, 3.0f}).to(device).requires_grad_(true)),
        w2(torch::tensor({0.5f, 0.25f}).to(device).requires_grad_(true)),
        optimizer(std::vector<torch::Tensor>{w1, w2}, torch::optim::SGDOptions(0.5)) {}

  void backward(GradScaler& scaler, const std::vector<float>& c1, const std::vector<float>& c2) {
    optimizer.zero_grad();
    auto loss =
        (w1 * torch::tensor(c1).to(device)).sum() + (w2 * torch::tensor(c2).to(device)).sum();
    scaler.scale(loss).backward();
  }

  c10::Device device;
  torch::Tensor w1, w2;
  torch::optim::SGD optimizer;
};

struct Step {
  std::vector<float> c1, c2;
};

// The steps both copies take: clean ones (growth), inf and NaN in either
// parameter (skips and backoff), and gradients whose scaled values overflow
// float32 (large coefficients times a large scale).
std::vector<Step> steps() {
  return {
      {{0.25f, -0.5f, 1.0f}, {2.0f, -4.0f}},   {{1e-3f, 2e-3f, -3e-3f}, {0.5f, 0.5f}},
      {{kInf, 1.0f, 1.0f}, {1.0f, 1.0f}},      {{1.0f, 1.0f, 1.0f}, {kNan, 1.0f}},
      {{0.125f, 0.0f, -0.125f}, {1.0f, 2.0f}}, {{3.0f, 3.0f, 3.0f}, {3.0f, 3.0f}},
      {{1e36f, 1.0f, 1.0f}, {1.0f, 1.0f}},     {{-kInf, kNan, 1.0f}, {1.0f, 1.0f}},
      {{0.5f, 0.5f, 0.5f}, {0.5f, 0.5f}},      {{1e-7f, -1e-7f, 0.0f}, {7.0f, -7.0f}},
  };
}

void expect_same_run(const GradScalerOptions& options, bool unscale_explicitly) {
  GradScaler on_gpu(options), on_cpu(options);
  Problem gpu(cuda_device(0)), cpu(c10::Device(c10::kCPU));
  int skipped = 0, index = 0;
  for (const Step& step : steps()) {
    SCOPED_TRACE("step " + std::to_string(index++));
    gpu.backward(on_gpu, step.c1, step.c2);
    cpu.backward(on_cpu, step.c1, step.c2);
    if (unscale_explicitly) {  // as before clipping
      on_gpu.unscale_(gpu.optimizer);
      on_cpu.unscale_(cpu.optimizer);
      EXPECT_TRUE(same_values(gpu.w1.grad(), cpu.w1.grad()))
          << gpu.w1.grad().cpu() << cpu.w1.grad();
      EXPECT_TRUE(same_values(gpu.w2.grad(), cpu.w2.grad()))
          << gpu.w2.grad().cpu() << cpu.w2.grad();
    }
    const bool gpu_stepped = on_gpu.step(gpu.optimizer);
    const bool cpu_stepped = on_cpu.step(cpu.optimizer);
    EXPECT_EQ(gpu_stepped, cpu_stepped);
    skipped += gpu_stepped ? 0 : 1;
    EXPECT_TRUE(same_values(gpu.w1.grad(), cpu.w1.grad())) << "unscaled gradients differ";
    EXPECT_TRUE(same_values(gpu.w2.grad(), cpu.w2.grad())) << "unscaled gradients differ";
    on_gpu.update();
    on_cpu.update();
    EXPECT_EQ(on_gpu.get_scale(), on_cpu.get_scale());
    EXPECT_EQ(on_gpu.growth_tracker(), on_cpu.growth_tracker());
    EXPECT_TRUE(same_values(gpu.w1.detach(), cpu.w1.detach())) << "parameters differ";
    EXPECT_TRUE(same_values(gpu.w2.detach(), cpu.w2.detach())) << "parameters differ";
  }
  // The sequence must exercise both branches, or agreement proves little.
  EXPECT_GE(skipped, 3);
  EXPECT_LE(skipped, static_cast<int>(steps().size()) - 3);
}

TEST(CudaGradScaler, FusedKernelsMatchThePortablePathStepByStep) {
  ACCELERATE_GPU_REQUIRE_CUDA();
  c10::DeviceGuard on_device(cuda_device(0));
  for (bool unscale_explicitly : {false, true}) {
    SCOPED_TRACE(unscale_explicitly ? "unscale_ then step" : "step unscales");
    // Growth every 2 clean steps, so growth, backoff and reset all happen.
    expect_same_run(GradScalerOptions().init_scale(1024.0).growth_interval(2), unscale_explicitly);
    // Accelerate's defaults.
    expect_same_run(GradScalerOptions(), unscale_explicitly);
  }
}

// Growth to a scale float32 cannot hold is refused by both paths
// (_amp_update_scale_ checks isfinite on the device).
TEST(CudaGradScaler, GrowthThatWouldOverflowIsRefusedAlike) {
  ACCELERATE_GPU_REQUIRE_CUDA();
  c10::DeviceGuard on_device(cuda_device(0));
  const GradScalerOptions options =
      GradScalerOptions().init_scale(std::ldexp(1.0, 126)).growth_factor(4.0).growth_interval(1);
  GradScaler on_gpu(options), on_cpu(options);
  Problem gpu(cuda_device(0)), cpu(c10::Device(c10::kCPU));
  // 2^126 * 2^-20 stays finite; 4 * 2^126 is inf and must not be taken.
  const float tiny = std::ldexp(1.0f, -20);
  for (int step = 0; step < 2; ++step) {
    gpu.backward(on_gpu, {tiny, tiny, tiny}, {tiny, tiny});
    cpu.backward(on_cpu, {tiny, tiny, tiny}, {tiny, tiny});
    EXPECT_TRUE(on_gpu.step(gpu.optimizer));
    EXPECT_TRUE(on_cpu.step(cpu.optimizer));
    on_gpu.update();
    on_cpu.update();
    EXPECT_EQ(on_gpu.get_scale(), std::ldexp(1.0, 126)) << "step " << step;
    EXPECT_EQ(on_cpu.get_scale(), std::ldexp(1.0, 126)) << "step " << step;
    EXPECT_EQ(on_gpu.growth_tracker(), on_cpu.growth_tracker());
    EXPECT_TRUE(same_values(gpu.w1.detach(), cpu.w1.detach()));
  }
}

// One optimizer over a GPU and a CPU parameter: each device's gradients go
// through their own path, and an inf in the CPU one skips the whole step.
TEST(CudaGradScaler, MixedDeviceOptimizerCombinesBothPathsFindings) {
  ACCELERATE_GPU_REQUIRE_CUDA();
  c10::DeviceGuard on_device(cuda_device(0));
  torch::Tensor on_gpu = torch::tensor({1.0f, 2.0f}).to(cuda_device(0)).requires_grad_(true);
  torch::Tensor on_cpu = torch::tensor({3.0f}).requires_grad_(true);
  torch::optim::SGD optimizer(std::vector<torch::Tensor>{on_gpu, on_cpu},
                              torch::optim::SGDOptions(1.0));
  GradScaler scaler(GradScalerOptions().init_scale(8.0));
  for (float cpu_coefficient : {kInf, 2.0f}) {
    SCOPED_TRACE("cpu coefficient " + std::to_string(cpu_coefficient));
    optimizer.zero_grad();
    auto loss = (on_gpu * torch::tensor({0.5f, 0.25f}).to(cuda_device(0))).sum() +
                (on_cpu * cpu_coefficient).sum().to(cuda_device(0));
    scaler.scale(loss).backward();
    const bool stepped = scaler.step(optimizer);
    EXPECT_EQ(stepped, std::isfinite(cpu_coefficient));
    EXPECT_TRUE(at::equal(on_gpu.grad().cpu(), torch::tensor({0.5f, 0.25f})));
    scaler.update();
  }
  EXPECT_EQ(scaler.get_scale(), 4.0) << "one backoff";
  EXPECT_TRUE(at::equal(on_gpu.detach().cpu(), torch::tensor({0.5f, 1.75f})));
  EXPECT_TRUE(at::equal(on_cpu.detach(), torch::tensor({1.0f})));
}

}  // namespace gpu_cuda_grad_scaler_test
