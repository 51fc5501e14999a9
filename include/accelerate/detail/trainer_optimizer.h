// The optimizer accelerate::Trainer builds from TrainingArguments::optim
// (trainer.h). Programs use Trainer, not this.
#pragma once

#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>

#include "accelerate/accelerator/optimizer.h"
#include "accelerate/trainer/training_arguments.h"

namespace torch::nn {
class Module;
}

namespace accelerate::detail {

// An accelerate::Optimizer<...> of the chosen kind, seen through what the
// Trainer needs: zero_grad is not virtual in LibTorch, so it is kept as a
// call of the wrapper's own (which does nothing while gradients accumulate).
struct TrainerOptimizer {
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  PreparedOptimizerBase* prepared = nullptr;  // the same object, for prepare()
  std::function<void()> zero_grad;
};

// The two groups Hugging Face builds (weight decay for every parameter but
// biases and LayerNorm weights) under args.optim's optimizer at
// learning_rate. Throws ConfigError for bad optim_args values.
TrainerOptimizer make_trainer_optimizer(const torch::nn::Module& model,
                                        const TrainingArguments& args);

}  // namespace accelerate::detail
