// An evaluation between training steps changes nothing about training: the
// parameters after training with an evaluation (a forward under
// torch::NoGradGuard, as examples/mnist/train.cpp evaluates) every two
// steps are bitwise those of the same training without it. Under bf16 the
// Accelerator's autocast region spans the whole loop; when it cached cast
// weights, the evaluation's copies (cast without grad mode, so without
// autograd history) were reused by the next training forward, and the
// parameters they came from got no gradient at that step. Checked for plain
// calls, activation checkpointing and ZeRO-3 units, on 1 and 2 ranks
// (threads with real collectives).
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "sharding/zero_test_model.h"
#include "sharding/zero_test_support.h"
#include "support/thread_ranks.h"

namespace eval_between_steps_test {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::testing::BlockStack;
using accelerate::testing::Call;

struct Recipe {
  bool bf16 = false;
  Call call = Call::kDirect;
  int zero_stage = 0;
  int world = 1;
};

// Each rank's whole parameters after 8 steps, evaluating after every second
// step when `evaluate`.
std::vector<at::Tensor> train(std::shared_ptr<Communicator> comm, const Recipe& recipe,
                              bool evaluate) {
  AcceleratorOptions options;
  if (recipe.bf16) options.mixed_precision(accelerate::MixedPrecision::kBF16);
  if (recipe.zero_stage > 0) {
    options.deepspeed_plugin(accelerate::DeepSpeedPlugin().zero_stage(recipe.zero_stage));
  }
  Accelerator accelerator(std::move(comm), options);
  BlockStack model(recipe.call);
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                       torch::optim::AdamWOptions(0.01));
  accelerate::DataLoader loader(accelerate::testing::zero_data(64 * recipe.world),
                                accelerate::DataLoaderOptions(8));
  accelerator.prepare(model, optimizer, loader);
  const at::Tensor probe = accelerate::testing::zero_data(8).get(0).data.reshape({1, 4});
  int step = 0;
  for (auto& batch : loader) {
    auto loss = torch::mse_loss(model->forward(batch.data).to(at::kFloat), batch.target);
    accelerator.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    if (evaluate && ++step % 2 == 0) {
      model->eval();
      {
        torch::NoGradGuard no_grad;
        (void)model->forward(probe);
      }
      model->train();
    }
  }
  return accelerate::testing::whole_weights(accelerator, *model);
}

std::vector<std::vector<at::Tensor>> train_on_ranks(const Recipe& recipe, bool evaluate) {
  return accelerate::testing::on_each_rank<std::vector<at::Tensor>>(
      recipe.world,
      [&](std::shared_ptr<Communicator> comm) { return train(std::move(comm), recipe, evaluate); });
}

std::string recipe_name(const ::testing::TestParamInfo<Recipe>& info) {
  const char* calls[] = {"unit_forward", "checkpoint", "direct"};
  const Recipe& r = info.param;
  return std::string(r.bf16 ? "bf16_" : "fp32_") + calls[static_cast<int>(r.call)] + "_zero" +
         std::to_string(r.zero_stage) + "_" + std::to_string(r.world) + "ranks";
}

class EvalBetweenSteps : public ::testing::TestWithParam<Recipe> {};

TEST_P(EvalBetweenSteps, TrainsBitwiseAsWithoutTheEvaluation) {
  const Recipe recipe = GetParam();
  const auto with_eval = train_on_ranks(recipe, true);
  const auto without = train_on_ranks(recipe, false);
  BlockStack initial(recipe.call);
  ASSERT_FALSE(without[0].empty());
  ASSERT_FALSE(at::equal(without[0][0], initial->parameters()[0]))
      << "training did not move the parameters: the comparison would prove nothing";
  for (int rank = 0; rank < recipe.world; ++rank) {
    ASSERT_EQ(with_eval[rank].size(), without[rank].size());
    for (std::size_t i = 0; i < without[rank].size(); ++i) {
      const at::Tensor& a = with_eval[rank][i];
      const at::Tensor& b = without[rank][i];
      EXPECT_TRUE(at::equal(a, b)) << "rank " << rank << ", parameter " << i << ": max difference "
                                   << (a - b).abs().max().item<double>();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, EvalBetweenSteps,
    ::testing::Values(Recipe{false, Call::kDirect, 0, 1}, Recipe{true, Call::kDirect, 0, 1},
                      Recipe{true, Call::kCheckpoint, 0, 1}, Recipe{false, Call::kCheckpoint, 0, 1},
                      Recipe{true, Call::kDirect, 0, 2}, Recipe{true, Call::kUnitForward, 3, 2},
                      Recipe{false, Call::kUnitForward, 3, 2},
                      Recipe{true, Call::kCheckpoint, 3, 2}),
    recipe_name);

}  // namespace eval_between_steps_test
