// A model whose weight autocast caches: aten::linear on a leaf float32 weight
// that requires grad. (LibTorch 1.13's torch::nn::Linear with a bias calls
// addmm on weight.t(), a view, which is never cached.)
#pragma once

#include <torch/torch.h>

namespace accelerate::testing {

struct CachedLinearImpl : torch::nn::Module {
  CachedLinearImpl() : weight(register_parameter("weight", torch::randn({3, 4}))) {}
  torch::Tensor forward(const torch::Tensor& x) { return torch::linear(x, weight); }
  torch::Tensor weight;
};
TORCH_MODULE(CachedLinear);

}  // namespace accelerate::testing
