// A real training job for the multi-machine launcher test (Accelerate's
// core contract): y = a·x + b trained 3 epochs with SGD(lr 0.1) and MSE on
// 32·N samples, batch 8 per rank, on however many ranks the launcher started.
// Rank 0 prints "trained a=... b=... on N ranks" and the plain one-process
// loop's result with batch 8·N as "reference a=... b=...": the launcher test
// checks that 2 machines x 2 ranks give what 4 local ranks give, and both
// what one process gives. Any error is one stderr line and exit code 1.
//
//   training_probe [--hold-first-attempt DIR]
// With the flag, every rank of the first attempt (TORCHELASTIC_RESTART_COUNT
// 0 or unset) writes its process id to DIR/rank<R>.pid once the group has
// formed and then waits to be killed, so that a test can kill one with
// SIGKILL and check that the launcher's restart trains; rank 0 also prints
// the attempt it trained in ("attempt N").
#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>

#include "accelerate/accelerator/accelerator.h"
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

// The first attempt under --hold-first-attempt: says where it is, then waits.
void hold_first_attempt(const std::string& folder, int rank) {
  const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
  if (restarts != nullptr && std::string(restarts) != "0") return;
  const std::string path = folder + "/rank" + std::to_string(rank) + ".pid";
  std::ofstream(path + ".tmp") << ::getpid() << "\n";
  std::rename((path + ".tmp").c_str(), path.c_str());
  std::this_thread::sleep_for(std::chrono::seconds(120));
  throw std::runtime_error("the first attempt was not killed within 120 s");
}

}  // namespace

int main(int argc, char** argv) try {
  accelerate::Accelerator accelerator;
  if (argc == 3 && std::string(argv[1]) == "--hold-first-attempt") {
    hold_first_attempt(argv[2], accelerator.process_index());
  } else if (argc != 1) {
    throw std::runtime_error("usage: training_probe [--hold-first-attempt DIR]");
  }
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
    if (const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT")) {
      std::cout << "attempt " << restarts << std::endl;
    }
  }
  return 0;
} catch (const std::exception& error) {
  std::cerr << "training_probe: error: " << error.what() << std::endl;
  return 1;
}
