// The regression of Accelerate's core contract, for every test that
// trains it: y = 2x + 3 plus 0.1·noise, drawn from a private generator (so
// ranks running as threads never touch torch's global one), and a
// Linear(1, 1) that starts at a = 0.5, b = -1.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cstdint>

#include "accelerate/data/dataset.h"

namespace accelerate {
namespace testing {

inline TensorDataset regression_data(int64_t samples, uint64_t seed = 1234) {
  auto generator = at::detail::createCPUGenerator(seed);
  auto x = at::randn({samples, 1}, generator);
  auto y = 2.0 * x + 3.0 + 0.1 * at::randn({samples, 1}, generator);
  return TensorDataset(x, y);
}

inline torch::nn::Linear fresh_regression_model() {
  torch::nn::Linear model(1, 1);
  torch::NoGradGuard no_grad;
  model->weight.fill_(0.5);
  model->bias.fill_(-1.0);
  return model;
}

}  // namespace testing
}  // namespace accelerate
