// Dropout at tp in real processes, for tests/launcher/tensor_parallel_dropout_test.sh:
// a tiny GPT-2 with dropout (seeded alike on every process) prepared at the
// launch's sizes, 4 AdamW steps on one batch for every process, then each
// rank prints
//   rank <r> losses <4 losses, %.9g> replicated <digest>
// Every rank of a tp group must print the same line. The losses agree
// whatever the masks (the split layers' collectives make them alike); the
// digest (the sum of every whole parameter's values, %.17g: wpe and the
// LayerNorms) agrees only if the replicated activations were dropped alike
// everywhere, or their gradients, and then the parameters, drift apart
// between the ranks. The split heads' and tokens' masks are each rank's own. Arguments: --dropout P
// (default 0.1),
// --checkpointing (activation checkpointing of every block). Any error is
// one stderr line and exit code 1.
#include <torch/torch.h>

#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/models/gpt2.h"

int main(int argc, char** argv) try {
  double dropout = 0.1;
  bool checkpointing = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--dropout" && i + 1 < argc) {
      dropout = std::stod(argv[++i]);
    } else if (arg == "--checkpointing") {
      checkpointing = true;
    } else {
      throw std::runtime_error(
          "usage: tensor_parallel_dropout_probe [--dropout P] [--checkpointing]");
    }
  }
  accelerate::Accelerator accelerator;
  torch::manual_seed(7);
  accelerate::models::GPT2Config config;
  config.vocab_size = 48;
  config.n_positions = 16;
  config.n_embd = 32;
  config.n_layer = 2;
  config.n_head = 4;
  config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = dropout;
  accelerate::models::GPT2LMHeadModel model(config);
  model->transformer->set_gradient_checkpointing(checkpointing);
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                       torch::optim::AdamWOptions(1e-2));
  accelerator.prepare(model, optimizer);
  model->train();
  std::string losses;
  for (int step = 0; step < 4; ++step) {
    const at::Tensor ids = (at::arange(32, at::kLong) * (step + 3)).remainder(48).reshape({2, 16});
    const at::Tensor loss = model->loss(ids, ids);
    accelerator.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    char text[32];
    std::snprintf(text, sizeof(text), " %.9g", loss.item<double>());
    losses += text;
  }
  double digest = 0;
  for (const auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    if (name.find("wpe") != std::string::npos || name.find("ln_") != std::string::npos) {
      digest += item.value().to(at::kDouble).sum().item<double>();
    }
  }
  char text[48];
  std::snprintf(text, sizeof(text), "%.17g", digest);
  std::cout << "rank " << accelerator.process_index() << " losses" << losses << " replicated "
            << text << std::endl;
  return 0;
} catch (const std::exception& error) {
  std::cerr << "tensor_parallel_dropout_probe: error: " << error.what() << std::endl;
  return 1;
}
