// A tensor-parallel training job for the multi-machine launcher test: a tiny
// Llama (seeded alike on every process) prepared at the launch's
// parallelism sizes (tp inside a machine, dp across), 4 AdamW steps on
// batches every process draws alike, then one line per rank and process
// group of what the group moved:
//   traffic <group> sent <bytes> off_machine <bytes>
// and on the main process "loss <last step's loss>". The test checks that
// only the data-parallel groups' bytes cross machines. Any error is one
// stderr line and exit code 1.
#include <torch/torch.h>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/models/llama.h"
#include "models/tiny_llama_config.h"

int main(int argc, char**) try {
  if (argc != 1) throw std::runtime_error("usage: tensor_parallel_probe (no arguments)");
  accelerate::Accelerator accelerator;
  torch::manual_seed(7);
  accelerate::models::LlamaForCausalLM model(accelerate::testing::tiny_llama_config(48, 16));
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                       torch::optim::AdamWOptions(1e-2));
  accelerator.prepare(model, optimizer);
  // Each data-parallel rank its own batch; every process of a tp group the same.
  const int64_t replica = accelerator.process_index() / accelerator.tensor_parallel().size();
  double last = 0;
  for (int step = 0; step < 4; ++step) {
    const at::Tensor ids =
        (at::arange(32, at::kLong) * (step + 3) + replica * 5).remainder(48).reshape({2, 16});
    const at::Tensor loss = model->loss(ids, ids);
    accelerator.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    last = loss.item<double>();
  }
  std::ostringstream report;
  for (const auto& group : accelerator.communicator().traffic()) {
    const accelerate::TrafficCount moved = group.total();
    if (moved.collectives == 0) continue;
    report << "traffic " << group.group << " sent " << moved.bytes_sent << " off_machine "
           << moved.bytes_sent_off_machine << "\n";
  }
  std::cout << report.str() << std::flush;
  if (accelerator.is_main_process()) {
    char text[64];
    std::snprintf(text, sizeof(text), "loss %.6f", last);
    std::cout << text << std::endl;
  }
  return 0;
} catch (const std::exception& error) {
  std::cerr << "tensor_parallel_probe: error: " << error.what() << std::endl;
  return 1;
}
