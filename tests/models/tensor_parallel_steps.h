// What the models' tensor-parallel tests share to train a model split and
// whole from one start: the initial weights (thread ranks share the
// default generator, so each rank copies these), a batch per step that is
// the same on every rank, and the losses of AdamW steps.
#pragma once

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <cstdint>
#include <vector>

namespace accelerate::testing {

// Every parameter of the model `build()` makes after manual_seed(seed).
template <typename Build>
std::vector<at::Tensor> initial_parameters_of(Build build, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<at::Tensor> initial;
  for (const auto& p : build()->parameters()) initial.push_back(p.detach().clone());
  return initial;
}

// `build()` with `initial`'s weights.
template <typename Build>
auto model_with(Build build, const std::vector<at::Tensor>& initial) {
  auto model = build();
  at::NoGradGuard no_grad;
  const auto parameters = model->parameters();
  for (size_t i = 0; i < parameters.size(); ++i) parameters[i].copy_(initial[i]);
  return model;
}

// Step `step`'s [2, tokens] batch of ids below `vocab`: a few patterns,
// something to learn in 50 steps.
inline at::Tensor step_batch(int step, int64_t vocab, int64_t tokens) {
  return (at::arange(2 * tokens, at::kLong) * (step % 5 + 3) + step)
      .remainder(vocab)
      .reshape({2, tokens});
}

// The losses of `steps` AdamW steps at `lr` on step_batch (each rank's
// optimizer over its own parts when the model is split).
template <typename Model>
std::vector<double> adamw_losses(Model& model, double lr, int steps, int64_t vocab,
                                 int64_t tokens) {
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(lr));
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    optimizer.zero_grad();
    const at::Tensor batch = step_batch(step, vocab, tokens);
    const at::Tensor loss = model->loss(batch, batch);
    loss.backward();
    optimizer.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

}  // namespace accelerate::testing
