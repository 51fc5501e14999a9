// The two-layer tanh network the Trainer tests train (inputs -> 8 ->
// outputs), its weights drawn N(0, 0.5) from a private generator so that
// thread ranks agree, and the copies of weights the tests compare.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace accelerate::testing {

struct TinyMlpImpl : torch::nn::Module {
  TinyMlpImpl(int64_t inputs, int64_t outputs, uint64_t seed)
      : fc1(register_module("fc1", torch::nn::Linear(inputs, 8))),
        fc2(register_module("fc2", torch::nn::Linear(8, outputs))) {
    auto generator = at::detail::createCPUGenerator(seed);
    torch::NoGradGuard no_grad;
    for (auto& p : parameters()) p.normal_(0.0, 0.5, generator);
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::tanh(fc1(x))); }
  torch::nn::Linear fc1, fc2;
};

using Weights = std::vector<at::Tensor>;

inline Weights weights_of(torch::nn::Module& model) {
  Weights out;
  for (const auto& p : model.parameters()) out.push_back(p.detach().clone());
  return out;
}

inline bool identical(const Weights& a, const Weights& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

}  // namespace accelerate::testing
