// accelerate::FusedAdamW against LibTorch's AdamW, whose update it fuses:
// the same parameters after steps with and without weight decay, on one and
// two threads; AdamW's own step wherever the loop does not apply; AdamW's
// checkpoints in both directions. Against torch.optim.AdamW(fused=True):
// trainer_reference_test.cpp.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <sstream>
#include <vector>

#include "accelerate/accelerator/optimizer.h"
#include "accelerate/common/errors.h"
#include "accelerate/schedule/fused_adamw.h"
#include "checkpoint/optimizer_kinds.h"

namespace fused_adamw_test {
namespace {

using torch::optim::AdamW;
using torch::optim::AdamWOptions;

// Two groups as the Trainer makes them (decayed and not), the first
// parameter larger than one thread's range of the fused loop.
std::vector<torch::optim::OptimizerParamGroup> groups(const std::vector<at::Tensor>& params,
                                                      const AdamWOptions& options) {
  std::vector<torch::optim::OptimizerParamGroup> made;
  made.emplace_back(std::vector<at::Tensor>{params[0], params[1]},
                    std::make_unique<AdamWOptions>(options));
  made.emplace_back(std::vector<at::Tensor>{params[2], params[3]},
                    std::make_unique<AdamWOptions>(AdamWOptions(options).weight_decay(0.0)));
  return made;
}

std::vector<at::Tensor> fresh_params(c10::ScalarType dtype = at::kFloat) {
  auto generator = at::detail::createCPUGenerator(11);
  std::vector<at::Tensor> params;
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{400, 257}, {33}, {3, 4, 5}, {1, 7}}) {
    params.push_back(at::randn(shape, generator).to(dtype).set_requires_grad(true));
  }
  return params;
}

// Gradients of step `step` (growing, as training's first steps are).
void set_grads(std::vector<at::Tensor>& params, int step) {
  auto generator = at::detail::createCPUGenerator(100 + step);
  for (auto& p : params) {
    p.mutable_grad() = (at::randn(p.sizes(), generator) * (1 + step)).to(p.scalar_type());
  }
}

double largest_relative_gap(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const at::Tensor x = a[i].detach().to(at::kDouble), y = b[i].detach().to(at::kDouble);
    worst = std::max(worst, ((x - y).abs().max() / y.abs().max()).item<double>());
  }
  return worst;
}

bool bitwise_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a[i].detach().equal(b[i].detach())) return false;
  }
  return true;
}

struct ThreadCount {
  explicit ThreadCount(int n) : before(at::get_num_threads()) { at::set_num_threads(n); }
  ~ThreadCount() { at::set_num_threads(before); }
  int before;
};

// Steps a FusedAdamW and an AdamW from the same start and returns the
// largest relative gap between their parameters after `steps`.
double gap_after(int steps, const AdamWOptions& options, int threads) {
  const ThreadCount thread_count(threads);
  std::vector<at::Tensor> ours = fresh_params(), theirs = fresh_params();
  accelerate::FusedAdamW fused(groups(ours, options), options);
  AdamW reference(groups(theirs, options), options);
  for (int step = 0; step < steps; ++step) {
    set_grads(ours, step);
    set_grads(theirs, step);
    EXPECT_TRUE(fused.steps_fused());
    fused.step();
    reference.step();
  }
  EXPECT_FALSE(bitwise_equal(ours, fresh_params())) << "the step changed nothing";
  return largest_relative_gap(ours, theirs);
}

TEST(FusedAdamW, EqualsAdamWWithAndWithoutDecayOnOneAndTwoThreads) {
  const AdamWOptions decayed = AdamWOptions(5e-3).weight_decay(0.1);
  const AdamWOptions other = AdamWOptions(0.05).betas({0.8, 0.95}).eps(1e-6).weight_decay(0.0);
  for (int threads : {1, 2}) {
    EXPECT_LE(gap_after(1, decayed, threads), 1e-6) << threads << " threads";
    EXPECT_LE(gap_after(12, decayed, threads), 1e-6) << threads << " threads";
    EXPECT_LE(gap_after(12, other, threads), 1e-6) << threads << " threads";
  }
}

// Where the loop does not apply, the step is AdamW's own: bit for bit.
void expect_adamw_step(std::vector<at::Tensor> ours, std::vector<at::Tensor> theirs,
                       const AdamWOptions& options) {
  accelerate::FusedAdamW fused(groups(ours, options), options);
  AdamW reference(groups(theirs, options), options);
  for (int step = 0; step < 3; ++step) {
    set_grads(ours, step);
    set_grads(theirs, step);
    EXPECT_FALSE(fused.steps_fused());
    fused.step();
    reference.step();
  }
  EXPECT_TRUE(bitwise_equal(ours, theirs));
}

TEST(FusedAdamW, RunsAdamWsStepForAmsgradAndOtherDtypesAndLayouts) {
  expect_adamw_step(fresh_params(), fresh_params(), AdamWOptions(1e-2).amsgrad(true));
  expect_adamw_step(fresh_params(at::kDouble), fresh_params(at::kDouble), AdamWOptions(1e-2));
  expect_adamw_step(fresh_params(at::kBFloat16), fresh_params(at::kBFloat16), AdamWOptions(1e-2));
  // A transposed (non-contiguous) parameter.
  auto transposed = [] {
    std::vector<at::Tensor> params = fresh_params();
    params[0] = params[0].detach().t().set_requires_grad(true);
    return params;
  };
  expect_adamw_step(transposed(), transposed(), AdamWOptions(1e-2));
}

TEST(FusedAdamW, IsAnAdamWToCheckpoints) {
  const AdamWOptions options = AdamWOptions(5e-3).weight_decay(0.1);
  std::vector<at::Tensor> ours = fresh_params(), theirs = fresh_params();
  accelerate::Optimizer<accelerate::FusedAdamW> fused(groups(ours, options), options);
  AdamW reference(groups(theirs, options), options);
  const auto* kind = accelerate::checkpoint::kind_of(fused);
  ASSERT_NE(kind, nullptr);
  EXPECT_EQ(std::string(kind->name), "AdamW");
  for (int step = 0; step < 3; ++step) {
    set_grads(ours, step);
    set_grads(theirs, step);
    fused.step();
    reference.step();
  }
  // Each loads the other's state and goes on as the other would have.
  std::stringstream from_fused, from_reference;
  torch::save(fused, from_fused);
  torch::save(reference, from_reference);
  std::vector<at::Tensor> a = fresh_params(), b = fresh_params();
  for (std::size_t i = 0; i < a.size(); ++i) {
    torch::NoGradGuard no_grad;
    a[i].copy_(ours[i]);
    b[i].copy_(theirs[i]);
  }
  AdamW adamw_loaded(groups(a, options), options);
  accelerate::FusedAdamW fused_loaded(groups(b, options), options);
  torch::load(adamw_loaded, from_fused);
  torch::load(fused_loaded, from_reference);
  for (int step = 3; step < 6; ++step) {
    for (auto* params : {&ours, &theirs, &a, &b}) set_grads(*params, step);
    fused.step();
    reference.step();
    adamw_loaded.step();
    fused_loaded.step();
  }
  EXPECT_LE(largest_relative_gap(a, ours), 1e-6);
  EXPECT_LE(largest_relative_gap(b, theirs), 1e-6);
  EXPECT_LE(largest_relative_gap(ours, theirs), 1e-6);
}

TEST(FusedAdamW, AStateOfAnotherShapeIsAnErrorNotAWritePastIt) {
  const AdamWOptions options(1e-2);
  std::vector<at::Tensor> small = {at::zeros({3}).set_requires_grad(true)};
  std::vector<at::Tensor> large = {at::zeros({3000}).set_requires_grad(true)};
  accelerate::FusedAdamW saved_from(small, options), loaded_into(large, options);
  small[0].mutable_grad() = at::ones({3});
  saved_from.step();
  std::stringstream state;
  torch::save(saved_from, state);
  torch::load(loaded_into, state);
  large[0].mutable_grad() = at::ones({3000});
  try {
    loaded_into.step();
    ADD_FAILURE() << "no error";
  } catch (const accelerate::Error& error) {
    EXPECT_STREQ(error.what(),
                 "FusedAdamW: the state's exp_avg is of shape [3] for a parameter of shape [3000]");
  }
}

}  // namespace
}  // namespace fused_adamw_test
