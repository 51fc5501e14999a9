// Activation checkpointing for the LibTorch C++ frontend, which has none
// (Python has torch.utils.checkpoint): a block's forward runs without
// keeping its intermediate activations, and backward runs it again to get
// them. Memory for activations drops from every layer's to the blocks'
// inputs plus one block's; the price is a second forward of each block.
//
//   for (auto& block : blocks) {
//     x = accelerate::checkpoint_activations(block, x);   // was: x = block->forward(x);
//   }
//
// The recomputation sees what the first run saw: the same input values, the
// same random numbers (dropout masks; the CPU generator, and the CUDA
// generators of the inputs' devices, are restored for it and then put back)
// and the same autocast state. Gradients are therefore those of the plain
// run, bitwise on the CPU. Parameters get their gradients through their
// usual accumulators, so data parallelism's and ZeRO's gradient hooks see
// them as without checkpointing.
//
// Without grad mode (evaluation under torch::NoGradGuard) the function just
// runs. Like PyTorch's reentrant checkpoint, the function must not change
// tensors it does not own in place, and its outputs must be floating-point.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <type_traits>
#include <vector>

#include "accelerate/common/arg.h"
#include "accelerate/sharding/unit_forward.h"

namespace accelerate {

struct ActivationCheckpointOptions {
  // Restore the random generators for the recomputation, so dropout draws
  // the same masks (PyTorch's preserve_rng_state). Off only for functions
  // that draw no random numbers, to save copying the generator states.
  ACCELERATE_ARG(bool, preserve_rng_state) = true;
};

using CheckpointedFunction = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// The general form: runs fn(inputs) without keeping its activations and
// returns its outputs.
// `parameters`: the tensors fn reads besides its inputs that need gradients
// (the weights of the modules it calls); they receive gradients in backward
// whether or not any input requires grad. Throws accelerate::Error if fn
// returns no tensor.
std::vector<at::Tensor> checkpoint_function(const CheckpointedFunction& fn,
                                            const std::vector<at::Tensor>& inputs,
                                            const std::vector<at::Tensor>& parameters,
                                            ActivationCheckpointOptions options = {});

// The common case: a module (or module holder) whose forward takes and
// returns one tensor; its parameters are the ones that get gradients.
// When prepare() made the module a ZeRO stage-3 unit, this call is also its
// unit_forward (unit_forward.h): its parameters are gathered around it.
template <class Module>
at::Tensor checkpoint_activations(Module& module, const at::Tensor& input,
                                  ActivationCheckpointOptions options = {}) {
  return detail::run_as_unit(*module, [&] {
    auto outputs = checkpoint_function(
        // A copy of the holder: backward recomputes long after the caller's
        // variable (often a loop's) has gone.
        [module](const std::vector<at::Tensor>& in) mutable {
          return std::vector<at::Tensor>{module->forward(in[0])};
        },
        {input}, module->parameters(), options);
    return outputs[0];
  });
}

// The same for a forward that also takes tensors needing no gradient (an
// attention mask, rotary tables): module->forward(input, constant, more...).
// They are kept (not recomputed) and passed again to the recomputation.
template <class Module, class... Tensors>
at::Tensor checkpoint_activations(Module& module, const at::Tensor& input,
                                  const at::Tensor& constant, const Tensors&... more) {
  static_assert((std::is_same_v<Tensors, at::Tensor> && ...),
                "checkpoint_activations: the forward's further arguments must be tensors");
  return detail::run_as_unit(*module, [&] {
    return checkpoint_function(
        // Copies of the holder and the constants: backward recomputes after
        // the caller's variables are gone.
        [module, constant, more...](const std::vector<at::Tensor>& in) mutable {
          return std::vector<at::Tensor>{module->forward(in[0], constant, more...)};
        },
        {input}, module->parameters())[0];
  });
}

}  // namespace accelerate
