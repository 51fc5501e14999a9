// ZeRO stages 1 and 2 train exactly as data parallelism (stage 0) does: the
// same model, data and loop on the same number of ranks (threads with real
// collectives) end with the same parameters. Buckets are made tiny so that
// parameters straddle shard boundaries and every rank owns pieces of several
// parameters. Sums are rank-ordered (shared memory), so equality is bitwise
// except where stated: stage 2's clip_grad_norm_ combines per-shard sums in
// double where LibTorch's clip sums per-parameter norms in float.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/common/errors.h"
#include "sharding/zero_test_model.h"
#include "sharding/zero_test_support.h"
#include "support/thread_ranks.h"

namespace {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::DeepSpeedPlugin;
using accelerate::testing::zero_data;
using accelerate::testing::ZeroNet;
using ::testing::HasSubstr;

enum class Opt { kSgdMomentum, kAdam, kAdamW };

struct Recipe {
  int stage = 0;
  Opt optimizer = Opt::kAdamW;
  int accumulation = 1;
  double clip = 0;            // 0: none
  double clip_value = 0;      // clip_grad_value_; 0: none
  bool two_backward = false;  // the loss in two halves, each its own synced backward
  bool bf16 = false;
  bool freeze_last = false;
  bool use_spare = true;
  bool two_groups = false;  // the first layer in its own group with another lr
  // fp16 loss scaling; at this step (counted from 0) the last rank's
  // first-layer bias gets an inf gradient, which only the ranks owning
  // those elements see: every rank must skip the step.
  bool fp16 = false;
  int inf_at_step = -1;
  bool gloo = false;  // collectives through Gloo instead of shared memory
};

struct Outcome {
  std::vector<at::Tensor> parameters;
  int64_t optimizer_state_elements = 0;  // of this rank
  bool grads_released = false;           // no model .grad defined after the last step
  double loss_scale = 1;
};

template <class Base, class Options>
Outcome run_loop(std::shared_ptr<Communicator> comm, const Recipe& recipe,
                 const std::function<Options()>& make_options) {
  AcceleratorOptions options;
  options.ddp_options(
      accelerate::GradientSyncOptions().bucket_cap_mb(0.002).first_bucket_cap_mb(0.0005));
  // No automatic clipping: stage 0 here is plain data parallelism, which does not clip.
  if (recipe.stage > 0) {
    options.deepspeed_plugin(
        DeepSpeedPlugin().zero_stage(recipe.stage).gradient_clipping(std::nullopt));
  }
  options.gradient_accumulation_steps(recipe.accumulation);
  if (recipe.bf16) options.mixed_precision(accelerate::MixedPrecision::kBF16);
  if (recipe.fp16) {  // the GradScaler without fp16 autocast, which the CPU lacks
    options.mixed_precision(accelerate::MixedPrecision::kFP16)
        .autocast_kwargs(accelerate::AutocastOptions().enabled(false));
  }
  const bool last_rank = comm->rank() == comm->world_size() - 1;
  Accelerator accelerator(std::move(comm), options);
  ZeroNet model;
  if (recipe.freeze_last) {
    for (auto& p : model->last->parameters()) p.set_requires_grad(false);
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (recipe.two_groups) {
    auto rest = model->second->parameters();
    for (auto& p : model->spare->parameters()) rest.push_back(p);
    for (auto& p : model->last->parameters()) rest.push_back(p);
    groups.emplace_back(model->first->parameters(),
                        std::make_unique<Options>(make_options().lr(0.003)));
    groups.emplace_back(rest, std::make_unique<Options>(make_options()));
  } else {
    groups.emplace_back(model->parameters(), std::make_unique<Options>(make_options()));
  }
  accelerate::Optimizer<Base> optimizer(std::move(groups), make_options());
  accelerate::DataLoader loader(zero_data(96), accelerate::DataLoaderOptions(8));
  accelerator.prepare(model, optimizer, loader);
  int step = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (auto& batch : loader) {
      auto scope = accelerator.accumulate();
      auto loss = torch::mse_loss(model->forward(batch.data, recipe.use_spare).to(at::kFloat),
                                  batch.target);
      if (step++ == recipe.inf_at_step && last_rank) {
        loss = loss + model->first->bias.sum() * std::numeric_limits<float>::infinity();
      }
      if (recipe.two_backward) {  // the first half of the batch, then the second
        const auto half = batch.data.size(0) / 2;
        accelerator.backward(torch::mse_loss(
            model->forward(batch.data.narrow(0, 0, half), recipe.use_spare).to(at::kFloat),
            batch.target.narrow(0, 0, half)));
        loss = torch::mse_loss(
            model->forward(batch.data.narrow(0, half, half), recipe.use_spare).to(at::kFloat),
            batch.target.narrow(0, half, half));
      }
      accelerator.backward(loss);
      if (recipe.clip > 0 && accelerator.sync_gradients()) {
        accelerator.clip_grad_norm_(model->parameters(), recipe.clip);
      }
      if (recipe.clip_value > 0 && accelerator.sync_gradients()) {
        accelerator.clip_grad_value_(model->parameters(), recipe.clip_value);
      }
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  Outcome outcome;
  for (const auto& p : model->parameters()) outcome.parameters.push_back(p.detach().clone());
  outcome.optimizer_state_elements = accelerate::testing::optimizer_state_elements(optimizer);
  if (accelerator.scaler()) outcome.loss_scale = accelerator.scaler()->get_scale();
  outcome.grads_released = true;
  for (const auto& p : model->parameters()) {
    if (p.grad().defined()) outcome.grads_released = false;
  }
  return outcome;
}

Outcome train(std::shared_ptr<Communicator> comm, const Recipe& recipe) {
  switch (recipe.optimizer) {
    case Opt::kSgdMomentum:
      return run_loop<torch::optim::SGD, torch::optim::SGDOptions>(comm, recipe, [] {
        return torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(0.01);
      });
    case Opt::kAdam:
      return run_loop<torch::optim::Adam, torch::optim::AdamOptions>(
          comm, recipe, [] { return torch::optim::AdamOptions(0.01); });
    case Opt::kAdamW:
      return run_loop<torch::optim::AdamW, torch::optim::AdamWOptions>(
          comm, recipe, [] { return torch::optim::AdamWOptions(0.01).weight_decay(0.05); });
  }
  return {};
}

// Every rank's outcome of `recipe` on `world` ranks.
std::vector<Outcome> train_on(int world, const Recipe& recipe) {
  std::vector<Outcome> outcomes(world);
  accelerate::testing::RankOptions transport;
  transport.shared_memory_all_reduce = !recipe.gloo;
  accelerate::testing::run_rank_communicators(
      world,
      [&](std::shared_ptr<Communicator> comm) {
        const int rank = comm->rank();
        outcomes[rank] = train(comm, recipe);
      },
      transport);
  return outcomes;
}

void expect_same_parameters(const std::vector<Outcome>& got, const std::vector<Outcome>& want,
                            double rtol = 0, double atol = 0) {
  ASSERT_EQ(got.size(), want.size());
  ZeroNet initial;
  EXPECT_FALSE(at::allclose(want[0].parameters[0], initial->parameters()[0]))
      << "training did not move the parameters: the comparison would prove nothing";
  for (std::size_t r = 0; r < got.size(); ++r) {
    EXPECT_EQ(got[r].loss_scale, want[r].loss_scale) << "rank " << r;
    ASSERT_EQ(got[r].parameters.size(), want[r].parameters.size());
    for (std::size_t i = 0; i < got[r].parameters.size(); ++i) {
      const at::Tensor& a = got[r].parameters[i];
      const at::Tensor& b = want[r].parameters[i];
      if (rtol == 0 && atol == 0) {
        EXPECT_TRUE(at::equal(a, b)) << "rank " << r << ", parameter " << i << ": max difference "
                                     << (a - b).abs().max().item<double>();
      } else {
        EXPECT_TRUE(at::allclose(a, b, rtol, atol))
            << "rank " << r << ", parameter " << i << ": max difference "
            << (a - b).abs().max().item<double>();
      }
    }
  }
}

struct ZeroCase {
  int world;
  int stage;
  Opt optimizer;
};

class ZeroEqualsDataParallel : public ::testing::TestWithParam<ZeroCase> {};

TEST_P(ZeroEqualsDataParallel, SameParametersBitwiseAndStateForTheShardOnly) {
  const ZeroCase c = GetParam();
  Recipe recipe;
  recipe.optimizer = c.optimizer;
  const auto reference = train_on(c.world, recipe);
  recipe.stage = c.stage;
  const auto sharded = train_on(c.world, recipe);
  expect_same_parameters(sharded, reference);
  int64_t total = 0, parameters = 0;
  for (const auto& p : reference[0].parameters) parameters += p.numel();
  for (int r = 0; r < c.world; ++r) {
    total += sharded[r].optimizer_state_elements;
    // Each rank holds state for its shard: about 1/N of the parameters
    // (padding and the first bucket's rounding aside).
    EXPECT_LE(sharded[r].optimizer_state_elements, parameters / c.world + 64) << "rank " << r;
    EXPECT_EQ(sharded[r].grads_released, c.stage == 2) << "rank " << r;
  }
  EXPECT_EQ(total, parameters) << "every element has its state on exactly one rank";
  EXPECT_EQ(reference[0].optimizer_state_elements, parameters);
}

std::string zero_case_name(const ::testing::TestParamInfo<ZeroCase>& info) {
  const char* names[] = {"sgd_momentum", "adam", "adamw"};
  return std::to_string(info.param.world) + "_ranks_stage_" + std::to_string(info.param.stage) +
         "_" + names[static_cast<int>(info.param.optimizer)];
}

INSTANTIATE_TEST_SUITE_P(StagesOptimizersRanks, ZeroEqualsDataParallel,
                         ::testing::Values(ZeroCase{2, 1, Opt::kAdamW}, ZeroCase{2, 2, Opt::kAdamW},
                                           ZeroCase{3, 2, Opt::kAdamW},
                                           ZeroCase{2, 2, Opt::kSgdMomentum},
                                           ZeroCase{3, 1, Opt::kSgdMomentum},
                                           ZeroCase{2, 2, Opt::kAdam}, ZeroCase{4, 2, Opt::kAdam}),
                         zero_case_name);

// Each variation of the loop, at stages 1 and 2 on 2 and 3 ranks, against
// stage 0 with the same variation.
// Bitwise unless a bound is given.
void expect_stages_match(Recipe recipe, double rtol = 0, double atol = 0) {
  for (int world : {2, 3}) {
    recipe.stage = 0;
    const auto reference = train_on(world, recipe);
    for (int stage : {1, 2}) {
      SCOPED_TRACE(std::to_string(world) + " ranks, stage " + std::to_string(stage));
      recipe.stage = stage;
      expect_same_parameters(train_on(world, recipe), reference, rtol, atol);
    }
  }
}

TEST(ZeroVariations, GradientAccumulation) {
  Recipe recipe;
  recipe.accumulation = 3;
  expect_stages_match(recipe);
}

TEST(ZeroVariations, ClippingTheGlobalNormOverAllShards) {
  Recipe recipe;
  recipe.optimizer = Opt::kSgdMomentum;
  recipe.clip = 0.05;  // clips most steps
  expect_stages_match(recipe, /*rtol=*/1e-5, /*atol=*/1e-6);
}

// Clamping is elementwise: the shards clamp exactly what data parallelism
// clamps.
TEST(ZeroVariations, ClippingValues) {
  Recipe recipe;
  recipe.optimizer = Opt::kSgdMomentum;
  recipe.clip_value = 0.02;
  expect_stages_match(recipe);
}

// Several backward passes before one step (GAN training, sync_each_batch):
// stage 2 adds each sync's averaged shard to the last, where data
// parallelism averages the gradients accumulated so far; the sums are
// associated differently, hence the bound.
TEST(ZeroVariations, TwoBackwardPassesBeforeEachStep) {
  Recipe recipe;
  recipe.two_backward = true;
  expect_stages_match(recipe, /*rtol=*/1e-5, /*atol=*/1e-6);
  recipe.stage = 2;
  Recipe one = recipe;
  one.two_backward = false;
  EXPECT_FALSE(at::equal(train_on(2, recipe)[0].parameters[0], train_on(2, one)[0].parameters[0]))
      << "the second backward pass changed nothing: its gradients were lost";
}

TEST(ZeroVariations, Bf16Autocast) {
  Recipe recipe;
  recipe.bf16 = true;
  expect_stages_match(recipe);
}

TEST(ZeroVariations, FrozenAndUnusedParameters) {
  Recipe recipe;
  recipe.freeze_last = true;
  recipe.use_spare = false;
  expect_stages_match(recipe);
}

TEST(ZeroVariations, ParameterGroupsWithTheirOwnOptions) {
  Recipe recipe;
  recipe.two_groups = true;
  expect_stages_match(recipe);
}

TEST(ZeroVariations, Fp16StepSkippedOnEveryRankWhenOneShardOverflows) {
  Recipe recipe;
  recipe.fp16 = true;
  recipe.inf_at_step = 3;
  expect_stages_match(recipe);
  // With clipping: the norm is that of the unscaled gradients on every stage.
  Recipe clipped = recipe;
  clipped.clip = 0.05;
  expect_stages_match(clipped, /*rtol=*/1e-5, /*atol=*/1e-6);
  // The skip happened: the scale backed off once from 65536.
  recipe.stage = 2;
  EXPECT_EQ(train_on(2, recipe)[0].loss_scale, 32768.0);
}

// Through Gloo (what jobs across machines use): on 2 processes a sum has one
// order, so the pairwise reduce-scatter equals Gloo's all-reduce bitwise too.
TEST(ZeroVariations, ThroughGlooOnTwoProcesses) {
  Recipe recipe;
  recipe.gloo = true;
  const auto reference = train_on(2, recipe);
  for (int stage : {1, 2}) {
    recipe.stage = stage;
    SCOPED_TRACE("stage " + std::to_string(stage));
    expect_same_parameters(train_on(2, recipe), reference);
  }
}

TEST(ZeroConfiguration, AStageOutsideZeroToThreeIsRefusedClearly) {
  accelerate::testing::run_rank_communicators(1, [](std::shared_ptr<Communicator> comm) {
    try {
      Accelerator accelerator(
          comm, AcceleratorOptions().deepspeed_plugin(DeepSpeedPlugin().zero_stage(4)));
      ADD_FAILURE() << "no error";
    } catch (const accelerate::ConfigError& error) {
      EXPECT_THAT(error.what(), HasSubstr("zero_stage expects 0, 1, 2 or 3, got 4"));
    }
  });
}

TEST(ZeroConfiguration, AModelPreparedAfterAnOptimizerHoldingItsParametersIsRefused) {
  accelerate::testing::run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    Accelerator accelerator(comm, AcceleratorOptions().deepspeed_plugin(DeepSpeedPlugin()));
    ZeroNet encoder, decoder;
    auto parameters = encoder->parameters();
    for (auto& p : decoder->parameters()) parameters.push_back(p);
    accelerate::Optimizer<torch::optim::SGD> optimizer(parameters, torch::optim::SGDOptions(0.1));
    try {
      accelerator.prepare(encoder, optimizer, decoder);
      ADD_FAILURE() << "no error";
    } catch (const accelerate::ConfigError& error) {
      EXPECT_THAT(error.what(), HasSubstr("prepare the model before its optimizer"));
    }
  });
}

TEST(ZeroConfiguration, OptimizerBeforeItsModelOrAPlainOptimizerIsRefused) {
  accelerate::testing::run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    Accelerator accelerator(comm, AcceleratorOptions().deepspeed_plugin(DeepSpeedPlugin()));
    EXPECT_EQ(accelerator.distributed_type(), accelerate::DistributedType::kDeepSpeed);
    ZeroNet model;
    accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                       torch::optim::SGDOptions(0.1));
    try {
      accelerator.prepare(optimizer, model);
      ADD_FAILURE() << "no error";
    } catch (const accelerate::ConfigError& error) {
      EXPECT_THAT(error.what(), HasSubstr("prepare the model before its optimizer"));
    }
    torch::optim::SGD plain(model->parameters(), torch::optim::SGDOptions(0.1));
    EXPECT_THROW(accelerator.prepare(plain), accelerate::ConfigError);
  });
}

}  // namespace
