// The ZeRO benchmarks' model: residual blocks of two Linear(width, width)
// layers, each called through accelerate::unit_forward, so that stage 3 makes
// every block a unit and stages 0-2 run it as plain calls.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "accelerate/sharding/unit_forward.h"

namespace bench {

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int width)
      : up(register_module("up", torch::nn::Linear(width, width))),
        down(register_module("down", torch::nn::Linear(width, width))) {}
  torch::Tensor forward(const torch::Tensor& x) { return x + down(torch::relu(up(x))); }
  torch::nn::Linear up, down;
};
TORCH_MODULE(Block);

struct BlockStackImpl : torch::nn::Module {
  BlockStackImpl(int depth, int width)
      : blocks(register_module("blocks", torch::nn::ModuleList())) {
    for (int i = 0; i < depth; ++i) {
      list.push_back(Block(width));
      blocks->push_back(list.back());
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    // The unit boundary stage 3 needs; a plain block->forward(x) otherwise.
    for (auto& block : list) x = accelerate::unit_forward(block, x);
    return x;
  }
  torch::nn::ModuleList blocks;
  std::vector<Block> list;  // the same modules, typed for unit_forward
};
TORCH_MODULE(BlockStack);

}  // namespace bench
