// CUDA autocast in bf16 and fp16, through AutocastGuard and through the
// Accelerator's mixed precision on a one-GPU job: a Linear computes in the
// low precision on the GPU, its parameters and gradients stay float32, and
// the results stay close to float32's. (CPU autocast has no fp16 in 1.13, so
// fp16 autocast is tested only here.)
//
// Tolerances, relative to the largest reference value: inputs and weights
// rounded to the low precision (2^-8 bf16, 2^-11 fp16 relative each) and the
// output rounded once more, with float32 accumulation: a few units of 2^-8
// (bf16) or 2^-11 (fp16); 2e-2 and 4e-3 leave a margin of ~4 and are still
// far from what a wrong dtype or a missed cast would give.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <string>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/precision/autocast.h"
#include "gpu/gpu_test_support.h"
#include "parallel/parallel_test_support.h"

namespace gpu_cuda_autocast_test {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::AutocastGuard;
using accelerate::AutocastOptions;
using accelerate::Communicator;
using accelerate::MixedPrecision;
using namespace accelerate::testing;

double tolerance_for(c10::ScalarType dtype) { return dtype == at::kBFloat16 ? 2e-2 : 4e-3; }

// max |got - want| / max |want|
double relative_error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.detach().cpu().to(at::kDouble), w = want.detach().cpu().to(at::kDouble);
  return (g - w).abs().max().item<double>() / w.abs().max().item<double>();
}

torch::nn::Linear deterministic_linear(const c10::Device& device) {
  torch::nn::Linear linear(64, 32);
  fill_deterministic(*linear);
  linear->to(device);
  return linear;
}

TEST(CudaAutocast, GuardRunsLinearInBf16AndFp16WithFp32ParametersAndGradients) {
  ACCELERATE_GPU_REQUIRE_CUDA();
  const c10::Device gpu = cuda_device(0);
  c10::DeviceGuard on_device(gpu);
  const at::Tensor x = rank_data(0, 0, {16, 64}).to(gpu);
  auto reference = deterministic_linear(gpu);
  const at::Tensor want = reference(x);
  want.pow(2).sum().backward();
  for (c10::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(std::string(c10::toString(dtype)));
    auto linear = deterministic_linear(gpu);
    at::Tensor out;
    {
      AutocastGuard autocast(c10::kCUDA, dtype);
      EXPECT_TRUE(autocast.active());
      EXPECT_TRUE(accelerate::autocast_enabled(c10::kCUDA));
      EXPECT_EQ(accelerate::autocast_dtype(c10::kCUDA), dtype);
      EXPECT_FALSE(accelerate::autocast_enabled(c10::kCPU)) << "CUDA autocast leaked to the CPU";
      out = linear(x);
      EXPECT_EQ(out.scalar_type(), dtype);
      EXPECT_EQ(out.device(), gpu);
      // An fp32 island inside the region.
      {
        AutocastGuard island(c10::kCUDA, dtype, AutocastOptions().enabled(false));
        EXPECT_EQ(linear(x).scalar_type(), at::kFloat);
      }
      EXPECT_EQ(linear(x).scalar_type(), dtype);
      // CPU operations are not CUDA autocast's business.
      torch::nn::Linear on_cpu(64, 32);
      EXPECT_EQ(on_cpu(x.cpu()).scalar_type(), at::kFloat);
      out.to(at::kFloat).pow(2).sum().backward();
    }
    EXPECT_FALSE(accelerate::autocast_enabled(c10::kCUDA));
    EXPECT_EQ(linear(x).scalar_type(), at::kFloat);
    EXPECT_LE(relative_error(out, want), tolerance_for(dtype));
    const auto params = linear->parameters();
    const auto reference_params = reference->parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(params[i].scalar_type(), at::kFloat) << "parameter " << i;
      ASSERT_TRUE(params[i].grad().defined()) << "parameter " << i;
      EXPECT_EQ(params[i].grad().scalar_type(), at::kFloat) << "parameter " << i;
      EXPECT_EQ(params[i].grad().device(), gpu);
      EXPECT_LE(relative_error(params[i].grad(), reference_params[i].grad()), tolerance_for(dtype))
          << "parameter " << i;
    }
  }
}

// The Accelerator's mixed precision on a CUDA job of one process: autocast
// around the constructing thread, fp16 loss scaling with the fused kernels,
// one optimizer step that is taken.
TEST(CudaAutocast, AcceleratorMixedPrecisionTrainsAStepOnTheGpu) {
  ACCELERATE_GPU_REQUIRE_CUDA();
  const c10::Device gpu = cuda_device(0);
  c10::DeviceGuard on_device(gpu);
  const at::Tensor x = rank_data(0, 1, {16, 64});
  const at::Tensor target = rank_data(0, 2, {16, 32});
  auto reference = deterministic_linear(gpu);
  const at::Tensor want = reference(x.to(gpu));
  torch::mse_loss(want, target.to(gpu)).backward();
  for (MixedPrecision precision : {MixedPrecision::kBF16, MixedPrecision::kFP16}) {
    const c10::ScalarType dtype = precision == MixedPrecision::kBF16 ? at::kBFloat16 : at::kHalf;
    SCOPED_TRACE(std::string(c10::toString(dtype)));
    auto comm = Communicator::connect(cuda_rank_job(0, 1));
    {
      Accelerator accelerator(comm, AcceleratorOptions().mixed_precision(precision));
      EXPECT_EQ(accelerator.device(), gpu);
      EXPECT_EQ(accelerator.scaler() != nullptr, precision == MixedPrecision::kFP16);
      EXPECT_TRUE(accelerate::autocast_enabled(c10::kCUDA));
      torch::nn::Linear model(64, 32);
      fill_deterministic(*model);
      accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                         torch::optim::SGDOptions(0.1));
      accelerator.prepare(model, optimizer);
      EXPECT_EQ(model->weight.device(), gpu) << "prepare() places the model on the job's GPU";
      const at::Tensor out = model(x.to(gpu));
      EXPECT_EQ(out.scalar_type(), dtype);
      EXPECT_LE(relative_error(out, want), tolerance_for(dtype));
      accelerator.backward(torch::mse_loss(out.to(at::kFloat), target.to(gpu)));
      if (auto scaler = accelerator.scaler()) {
        EXPECT_EQ(scaler->get_scale(), 65536.0);
        EXPECT_EQ(scaler->scale(at::ones({}, at::TensorOptions().device(gpu))).device(), gpu);
      }
      const at::Tensor before = model->weight.detach().clone();
      optimizer.step();  // fp16: unscales (fused kernel), finds no inf, steps
      EXPECT_FALSE(accelerator.optimizer_step_was_skipped());
      EXPECT_FALSE(at::equal(before, model->weight.detach())) << "the step was not taken";
      const auto params = model->parameters();
      const auto reference_params = reference->parameters();
      for (std::size_t i = 0; i < params.size(); ++i) {
        EXPECT_EQ(params[i].scalar_type(), at::kFloat) << "parameter " << i;
        EXPECT_EQ(params[i].grad().scalar_type(), at::kFloat) << "parameter " << i;
        // fp16: the gradients are unscaled by the step.
        EXPECT_LE(relative_error(params[i].grad(), reference_params[i].grad()),
                  tolerance_for(dtype))
            << "parameter " << i;
      }
    }
    EXPECT_FALSE(accelerate::autocast_enabled(c10::kCUDA)) << "the Accelerator's scope ended";
  }
}

// An evaluation (a forward under no-grad) between steps leaves training on
// the GPU bitwise as it is without one, in bf16 and in fp16 with loss
// scaling: autocast's region around the loop keeps no cast copies, which the
// evaluation would leave without autograd history for the next step.
TEST(CudaAutocast, EvaluatingBetweenStepsTrainsBitwiseAsWithout) {
  ACCELERATE_GPU_REQUIRE_CUDA();
  const c10::Device gpu = cuda_device(0);
  c10::DeviceGuard on_device(gpu);
  const at::Tensor x = rank_data(0, 1, {16, 64}).to(gpu);
  const at::Tensor target = rank_data(0, 2, {16, 32}).to(gpu);
  for (MixedPrecision precision : {MixedPrecision::kBF16, MixedPrecision::kFP16}) {
    SCOPED_TRACE(accelerate::to_string(precision));
    auto train = [&](bool evaluate) {
      auto comm = Communicator::connect(cuda_rank_job(0, 1));
      Accelerator accelerator(comm, AcceleratorOptions().mixed_precision(precision));
      torch::nn::Linear model(64, 32);
      fill_deterministic(*model);
      accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                         torch::optim::SGDOptions(0.1));
      accelerator.prepare(model, optimizer);
      for (int step = 1; step <= 6; ++step) {
        accelerator.backward(torch::mse_loss(model(x).to(at::kFloat), target));
        optimizer.step();
        optimizer.zero_grad();
        if (evaluate && step % 2 == 0) {
          torch::NoGradGuard no_grad;
          (void)model(x);
        }
      }
      return std::vector<at::Tensor>{model->weight.detach().cpu(), model->bias.detach().cpu()};
    };
    const auto with_eval = train(true), without = train(false);
    for (std::size_t i = 0; i < without.size(); ++i) {
      EXPECT_TRUE(at::equal(with_eval[i], without[i])) << "parameter " << i;
    }
  }
}

}  // namespace gpu_cuda_autocast_test
