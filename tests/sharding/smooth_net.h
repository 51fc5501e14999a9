// A small model for the sharded-training tests whose results are compared
// within bounds rather than bitwise: tanh residual blocks (units at stage 3,
// called through unit_forward) between a root input and output layer, with
// random weights and nothing exact in low precision. Used by the
// low-precision and ZeRO++ tests (tests/sharding/).
#pragma once

#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <memory>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/sharding/unit_forward.h"

namespace sharding_test_models {

struct SmoothBlockImpl : torch::nn::Module {
  SmoothBlockImpl()
      : up(register_module("up", torch::nn::Linear(16, 32))),
        down(register_module("down", torch::nn::Linear(32, 16))) {}
  torch::Tensor forward(const torch::Tensor& x) { return x + down(torch::tanh(up(x))); }
  torch::nn::Linear up, down;
};
TORCH_MODULE(SmoothBlock);

struct SmoothNetImpl : torch::nn::Module {
  SmoothNetImpl()
      : input(register_module("input", torch::nn::Linear(4, 16))),
        blocks(register_module("blocks", torch::nn::ModuleList())),
        output(register_module("output", torch::nn::Linear(16, 1))) {
    for (int i = 0; i < 3; ++i) blocks->push_back(SmoothBlock());
    auto generator = at::detail::createCPUGenerator(47);
    torch::NoGradGuard no_grad;
    for (auto& parameter : parameters()) {
      parameter.copy_(at::randn(parameter.sizes(), generator) * 0.15);
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::tanh(input(x));
    for (const auto& module : *blocks) {
      auto block = std::dynamic_pointer_cast<SmoothBlockImpl>(module);
      h = accelerate::unit_forward(block, h);
      if (record_first_output && !first_output.defined()) first_output = h;
    }
    return output(h);
  }
  // With record_first_output, the first unit's output since first_output
  // was last reset (a test poisons it); off, no graph is kept past a step.
  bool record_first_output = false;
  torch::Tensor first_output;
  torch::nn::Linear input;
  torch::nn::ModuleList blocks;
  torch::nn::Linear output;
};
TORCH_MODULE(SmoothNet);

// Steps [first, last) of the tests' regression on `model`, each on a batch
// seeded by the step and `rank` (a resumed run sees the batches the
// uninterrupted one did); after_step(step) runs after each optimizer step.
template <class Optimizer, class AfterStep>
void train_regression_steps(accelerate::Accelerator& accelerator, SmoothNet& model,
                            Optimizer& optimizer, int rank, int first, int last,
                            AfterStep&& after_step) {
  for (int step = first; step < last; ++step) {
    auto generator = at::detail::createCPUGenerator(1000 * step + rank);
    const at::Tensor x = at::randn({8, 4}, generator);
    accelerator.backward(torch::mse_loss(model->forward(x), torch::sin(x.sum(1, true))));
    optimizer.step();
    optimizer.zero_grad();
    after_step(step);
  }
}

}  // namespace sharding_test_models
