// AdamW whose step makes one pass over memory per parameter: LibTorch's
// torch::optim::AdamW (same options, state, checkpoints and results up to
// float rounding), with the update of a float CPU parameter, its two moments
// and the weight decay done by one vectorized loop on LibTorch's intra-op
// threads instead of nine tensor operations, each of which reads and writes
// the whole parameter. It is what the Trainer's optim "adamw_torch_fused"
// (transformers' torch.optim.AdamW(fused=True)) builds:
//
//   accelerate::Optimizer<accelerate::FusedAdamW> optimizer(
//       model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
//
// A step with amsgrad, or with any parameter that is not a contiguous float
// CPU tensor with a dense contiguous gradient of its shape (bf16 or fp16
// weights, CUDA, sparse gradients), runs AdamW's own step for the whole
// optimizer. Being an AdamW, it is checkpointed, resharded and merged as one.
#pragma once

#include <torch/optim/adamw.h>

namespace accelerate {

class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;

  torch::Tensor step(LossClosure closure = nullptr) override;

  // Whether step() would run the fused loop now: no amsgrad, and every
  // parameter with a gradient a contiguous float CPU tensor with a gradient
  // of the same kind and shape.
  bool steps_fused() const;
};

}  // namespace accelerate
