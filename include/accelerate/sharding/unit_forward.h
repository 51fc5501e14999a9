// The call that marks a unit of the model for ZeRO stage 3 (FSDP's
// FULL_SHARD; docs/sharding.md, "Stage 3"). LibTorch's C++ modules have no
// forward hooks, so a library cannot notice when a block starts and ends;
// the model says so by calling its blocks through this function:
//
//   for (auto& block : blocks) {
//     x = accelerate::unit_forward(block, x);   // was: x = block->forward(x);
//   }
//
// (accelerate::checkpoint_activations does the same, and checkpoints too.)
// When prepare() made the block a unit, its parameters are gathered from
// every process's shards just before it runs and freed right after, and
// backward gathers them again for the block's gradients. Otherwise the call
// is block->forward(x) and costs nothing, so a model written this way runs
// unchanged under data parallelism, ZeRO 1-2 and one process.
//
// Once a unit has run through this call, its parameters hold no memory
// between calls: do not read them, or call its forward directly, outside
// it (Accelerator::save_model and the state dict functions gather them).
#pragma once

#include <functional>
#include <utility>

#include <ATen/core/Tensor.h>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace accelerate {
namespace detail {
// Runs `forward` as ZeRO stage 3's unit `module` when prepare() made it one,
// else just runs it.
at::Tensor run_as_unit(torch::nn::Module& module, const std::function<at::Tensor()>& forward);
}  // namespace detail

// `module`: a module holder (or shared_ptr) whose forward returns a tensor.
template <class Module, class... Inputs>
at::Tensor unit_forward(Module& module, Inputs&&... inputs) {
  return detail::run_as_unit(*module,
                             [&] { return module->forward(std::forward<Inputs>(inputs)...); });
}

}  // namespace accelerate
