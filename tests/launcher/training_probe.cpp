// A real training job for the multi-machine launcher test (Accelerate's
// core contract): y = a·x + b trained 3 epochs with SGD(lr 0.1) and MSE on
// 32·N samples, batch 8 per rank, on however many ranks the launcher started.
// Rank 0 prints "trained a=... b=... on N ranks" and the plain one-process
// loop's result with batch 8·N as "reference a=... b=...": the launcher test
// checks that 2 machines x 2 ranks give what 4 local ranks give, and both
// what one process gives. Any error is one stderr line and exit code 1.
#include <torch/torch.h>

#include <cstdio>
#include <iostream>

#include "accelerate/accelerator.h"
#include "support/regression_problem.h"

namespace {

using accelerate::testing::regression_data;

std::string describe(const torch::nn::Linear& model) {
  char text[96];
  std::snprintf(text, sizeof(text), "a=%.6f b=%.6f", model->weight.item<double>(),
                model->bias.item<double>());
  return text;
}

std::string train_plain(int64_t samples, size_t batch) {
  auto model = accelerate::testing::fresh_regression_model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  accelerate::DataLoader loader(regression_data(samples), accelerate::DataLoaderOptions(batch));
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (auto& batch_data : loader) {
      optimizer.zero_grad();
      torch::mse_loss(model->forward(batch_data.data), batch_data.target).backward();
      optimizer.step();
    }
  }
  return describe(model);
}

}  // namespace

int main() try {
  accelerate::Accelerator accelerator;
  const int n = accelerator.num_processes();
  auto model = accelerate::testing::fresh_regression_model();
  accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                     torch::optim::SGDOptions(0.1));
  accelerate::DataLoader loader(regression_data(32 * n), accelerate::DataLoaderOptions(8));
  accelerator.prepare(model, optimizer, loader);
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (auto& batch : loader) {
      accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  if (accelerator.is_main_process()) {
    std::cout << "trained " << describe(model) << " on " << n << " ranks" << std::endl;
    std::cout << "reference " << train_plain(32 * n, 8 * static_cast<size_t>(n)) << std::endl;
  }
  return 0;
} catch (const std::exception& error) {
  std::cerr << "training_probe: error: " << error.what() << std::endl;
  return 1;
}
