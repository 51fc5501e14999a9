// The model and data the ZeRO tests train: y = sum(sin(x)) + noise with 4
// inputs, and an MLP whose last layer can be frozen and whose `spare` layer
// can be left out of forward (an unused parameter). Parameters and data come
// from private generators, so ranks running as threads agree.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "accelerate/dataset.h"

namespace accelerate {
namespace testing {

struct ZeroNetImpl : torch::nn::Module {
  ZeroNetImpl()
      : first(register_module("first", torch::nn::Linear(4, 24))),
        second(register_module("second", torch::nn::Linear(24, 24))),
        spare(register_module("spare", torch::nn::Linear(24, 24))),
        last(register_module("last", torch::nn::Linear(24, 1))) {
    auto generator = at::detail::createCPUGenerator(41);
    torch::NoGradGuard no_grad;
    for (auto& parameter : parameters())
      parameter.copy_(at::randn(parameter.sizes(), generator) * 0.3);
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_spare) {
    auto h = torch::tanh(second(torch::tanh(first(x))));
    if (use_spare) h = torch::tanh(spare(h));
    return last(h);
  }
  torch::nn::Linear first, second, spare, last;
};
TORCH_MODULE(ZeroNet);

inline accelerate::TensorDataset zero_data(int64_t samples) {
  auto generator = at::detail::createCPUGenerator(97);
  auto x = at::randn({samples, 4}, generator);
  auto y = x.sin().sum(1, true) + 0.05 * at::randn({samples, 1}, generator);
  return accelerate::TensorDataset(x, y);
}

}  // namespace testing
}  // namespace accelerate
