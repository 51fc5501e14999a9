// The models and data the ZeRO tests train: y = sum(sin(x)) + noise with 4
// inputs, an MLP whose last layer can be frozen and whose `spare` layer
// can be left out of forward (an unused parameter), and a stack of blocks
// for stage 3. Parameters and data come
// from private generators, so ranks running as threads agree.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "accelerate/data/dataset.h"
#include "accelerate/memory/activation_checkpointing.h"
#include "accelerate/sharding/unit_forward.h"

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

// ZeRO stage 3's test model: residual blocks (the units) called through
// accelerate::unit_forward, checkpoint_activations or directly, between an
// input and an output layer, all reading a root parameter `shared` (a weight
// that stays outside the units).
enum class Call { kUnitForward, kCheckpoint, kDirect };

struct ResidualBlockImpl : torch::nn::Module {
  explicit ResidualBlockImpl(int64_t width = 16, int64_t hidden = 32)
      : up(register_module("up", torch::nn::Linear(width, hidden))),
        down(register_module("down", torch::nn::Linear(hidden, width))) {}
  // `shared`: a root parameter every block reads too (a tied weight, owned
  // outside the units).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& shared) {
    return x + down(torch::tanh(up(x))) * shared;
  }
  torch::Tensor forward(const torch::Tensor& x) { return forward(x, torch::ones({x.size(-1)})); }
  torch::nn::Linear up, down;
};
TORCH_MODULE(ResidualBlock);

struct BlockStackImpl : torch::nn::Module {
  // `depth` blocks of Linear(width, hidden) and Linear(hidden, width).
  explicit BlockStackImpl(Call call = Call::kUnitForward, int depth = 3, int64_t width = 16,
                          int64_t hidden = 32)
      : call(call),
        input(register_module("input", torch::nn::Linear(4, width))),
        blocks(register_module("blocks", torch::nn::ModuleList())),
        output(register_module("output", torch::nn::Linear(width, 1))) {
    for (int i = 0; i < depth; ++i) blocks->push_back(ResidualBlock(width, hidden));
    shared = register_parameter("shared", torch::ones({width}));
    // In place, as LibTorch's initialisers do (so it also builds inside
    // accelerate::init_empty_weights()).
    auto generator = at::detail::createCPUGenerator(43);
    torch::NoGradGuard no_grad;
    for (auto& parameter : parameters()) {
      parameter.normal_(parameter.dim() == 1 ? 1.0 : 0.0, 0.3, generator);
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::tanh(input(x)) * shared;  // used even when the blocks do not read it
    ++calls;
    for (std::size_t i = 0; i < blocks->size(); ++i) {
      // An unused unit: the last block sits out every other forward pass.
      if (skip_last_block_every_other_call && i + 1 == blocks->size() && calls % 2 == 0) break;
      auto block = std::dynamic_pointer_cast<ResidualBlockImpl>(blocks[i]);
      switch (call) {
        case Call::kUnitForward:
          h = accelerate::unit_forward(block, h, shared);
          break;
        case Call::kCheckpoint:
          h = accelerate::checkpoint_activations(block, h);
          break;
        case Call::kDirect:
          h = block->forward(h, shared);
          break;
      }
    }
    return output(h);
  }
  Call call;
  bool skip_last_block_every_other_call = false;
  int64_t calls = 0;
  torch::nn::Linear input;
  torch::nn::ModuleList blocks;
  torch::nn::Linear output;
  torch::Tensor shared;
};
TORCH_MODULE(BlockStack);

inline accelerate::TensorDataset zero_data(int64_t samples) {
  auto generator = at::detail::createCPUGenerator(97);
  auto x = at::randn({samples, 4}, generator);
  auto y = x.sin().sum(1, true) + 0.05 * at::randn({samples, 1}, generator);
  return accelerate::TensorDataset(x, y);
}

}  // namespace testing
}  // namespace accelerate
