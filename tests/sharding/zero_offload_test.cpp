// CPU offloading (offload_optimizer_device / offload_param_device "cpu",
// FSDP's cpu_offload) trains exactly as the same stage without it, with the
// optimizer stepping host copies of the shards. On a CPU-only job
// offloading changes nothing unless ACCELERATE_OFFLOAD_ON_CPU_JOB asks for
// its copies anyway, which is how these tests run the offload path without
// a GPU: every copy to the host and back happens, between two buffers of
// CPU memory. Ranks are threads with real collectives.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <unordered_set>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/memory/empty_weights.h"
#include "sharding/zero_optimizer.h"
#include "sharding/zero_test_model.h"
#include "sharding/zero_test_support.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

namespace zero_offload_test {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::DeepSpeedPlugin;
using accelerate::FullyShardedDataParallelPlugin;
using accelerate::OffloadDevice;
using accelerate::testing::BlockStack;
using accelerate::testing::zero_data;
using ::testing::HasSubstr;

enum class Offload { kNone, kOptimizer, kParameters, kFsdp };

struct Recipe {
  int stage = 3;
  Offload offload = Offload::kNone;
  bool copies_on_cpu = true;  // ACCELERATE_OFFLOAD_ON_CPU_JOB
  int accumulation = 1;
  double clip = 0;
  bool bf16 = false;
  bool built_empty = false;  // zero3_init_flag, the model built inside zero3_init()
};

AcceleratorOptions options_for(const Recipe& recipe) {
  AcceleratorOptions options;
  options.ddp_options(
      accelerate::GradientSyncOptions().bucket_cap_mb(0.002).first_bucket_cap_mb(0.0005));
  if (recipe.offload == Offload::kFsdp) {
    options.fsdp_plugin(FullyShardedDataParallelPlugin()
                            .cpu_offload(true)
                            .auto_wrap_policy(accelerate::FsdpAutoWrapPolicy::kTransformerBasedWrap)
                            .transformer_cls_names_to_wrap({"ResidualBlock"}));
  } else {
    DeepSpeedPlugin plugin = DeepSpeedPlugin()
                                 .zero_stage(recipe.stage)
                                 .gradient_clipping(std::nullopt)
                                 .zero3_init_flag(recipe.built_empty);
    if (recipe.offload != Offload::kNone) plugin.offload_optimizer_device(OffloadDevice::kCpu);
    if (recipe.offload == Offload::kParameters) plugin.offload_param_device(OffloadDevice::kCpu);
    options.deepspeed_plugin(plugin);
  }
  if (recipe.copies_on_cpu) {
    options.environment(accelerate::Environment{{"ACCELERATE_OFFLOAD_ON_CPU_JOB", "true"}});
  }
  options.gradient_accumulation_steps(recipe.accumulation);
  if (recipe.bf16) options.mixed_precision(accelerate::MixedPrecision::kBF16);
  return options;
}

struct Outcome {
  std::vector<at::Tensor> parameters;
  // Whether some parameter the optimizer steps shares memory with one of the
  // model's parameters (it does when the optimizer steps the shards in place).
  bool optimizer_steps_model_memory = false;
  int64_t optimizer_state_elements = 0;
  bool units_released = false;
  at::Tensor eval_no_grad;
};

Outcome train(std::shared_ptr<Communicator> comm, const Recipe& recipe) {
  Accelerator accelerator(std::move(comm), options_for(recipe));
  BlockStack model{nullptr};
  {
    std::optional<accelerate::EmptyWeightsGuard> guard;
    if (recipe.built_empty) guard.emplace(accelerator.zero3_init());
    model = BlockStack();
  }
  accelerate::Optimizer<torch::optim::AdamW> optimizer(
      model->parameters(), torch::optim::AdamWOptions(0.01).weight_decay(0.05));
  accelerate::DataLoader loader(zero_data(96), accelerate::DataLoaderOptions(8));
  accelerator.prepare(model, optimizer, loader);
  Outcome outcome;
  outcome.optimizer_steps_model_memory =
      accelerate::testing::optimizer_steps_model_memory(optimizer, *model);
  accelerate::testing::train_epochs(accelerator, model, optimizer, loader, recipe.clip);
  outcome.units_released = accelerate::testing::all_released(model->blocks->parameters());
  model->eval();
  {
    torch::NoGradGuard no_grad;
    outcome.eval_no_grad = model->forward(zero_data(8).get(0).data.reshape({1, 4})).clone();
  }
  outcome.parameters = accelerate::testing::whole_weights(accelerator, *model);
  outcome.optimizer_state_elements = accelerate::testing::optimizer_state_elements(optimizer);
  return outcome;
}

std::vector<Outcome> train_on(int world, const Recipe& recipe) {
  return accelerate::testing::on_each_rank<Outcome>(
      world, [&](std::shared_ptr<Communicator> comm) { return train(comm, recipe); });
}

// `tolerance` 0: bitwise.
void expect_same_parameters(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                            const std::string& what, double tolerance = 0) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double difference = (got[i] - want[i]).abs().max().item<double>();
    if (tolerance == 0) {
      EXPECT_TRUE(at::equal(got[i], want[i]))
          << what << ", parameter " << i << ": max difference " << difference;
    } else {
      EXPECT_LE(difference, tolerance) << what << ", parameter " << i;
    }
  }
}

void expect_same(const std::vector<Outcome>& got, const std::vector<Outcome>& want,
                 double tolerance = 0) {
  ASSERT_EQ(got.size(), want.size());
  BlockStack initial;
  ASSERT_FALSE(want[0].parameters.empty());
  EXPECT_FALSE(at::allclose(want[0].parameters[0], initial->parameters()[0]))
      << "training did not move the parameters: the comparison would prove nothing";
  for (std::size_t r = 0; r < got.size(); ++r) {
    expect_same_parameters(got[r].parameters, want[r].parameters, "rank " + std::to_string(r),
                           tolerance);
    if (tolerance == 0) {
      EXPECT_TRUE(at::equal(got[r].eval_no_grad, want[r].eval_no_grad)) << "rank " << r;
    }
    EXPECT_EQ(got[r].optimizer_state_elements, want[r].optimizer_state_elements) << "rank " << r;
  }
}

TEST(ZeroOffload, OptimizerStepsHostCopiesAndTrainsBitwiseAsOnTheDeviceAtEveryStage) {
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    Recipe recipe;
    recipe.stage = stage;
    const auto on_device = train_on(2, recipe);
    recipe.offload = Offload::kOptimizer;
    const auto offloaded = train_on(2, recipe);
    expect_same(offloaded, on_device);
    for (int r = 0; r < 2; ++r) {
      // (At stage 3 the root parameters' shards are views of the model's.)
      EXPECT_TRUE(on_device[r].optimizer_steps_model_memory) << "rank " << r;
      EXPECT_FALSE(offloaded[r].optimizer_steps_model_memory) << "rank " << r;
    }
    EXPECT_EQ(offloaded[0].units_released, stage == 3);
  }
}

TEST(ZeroOffload, ParametersOffloadedAtStageThreeTrainBitwiseWithUnitsFreed) {
  Recipe recipe;
  const auto on_device = train_on(3, recipe);
  for (Offload offload : {Offload::kParameters, Offload::kFsdp}) {
    SCOPED_TRACE(offload == Offload::kFsdp ? "FSDP cpu_offload" : "offload_param_device cpu");
    recipe.offload = offload;
    const auto offloaded = train_on(3, recipe);
    expect_same(offloaded, on_device);
    for (int r = 0; r < 3; ++r) {
      EXPECT_TRUE(offloaded[r].units_released) << "rank " << r;
      EXPECT_FALSE(offloaded[r].optimizer_steps_model_memory) << "rank " << r;
    }
  }
}

// The model built without memory off the main process (zero3_init): the
// shards come from the main process, and the host copies from them.
TEST(ZeroOffload, AModelBuiltInsideZero3InitOffloadsAsOneBuiltWhole) {
  Recipe recipe;
  const auto on_device = train_on(2, recipe);
  recipe.built_empty = true;
  for (Offload offload : {Offload::kOptimizer, Offload::kParameters}) {
    SCOPED_TRACE(offload == Offload::kOptimizer ? "optimizer" : "parameters");
    recipe.offload = offload;
    expect_same(train_on(2, recipe), on_device);
  }
}

// Under the Accelerator: where the optimizer's tensors are. With the
// parameters offloaded a unit's shard is the host tensor the optimizer
// steps; with the optimizer alone it steps a copy.
TEST(ZeroOffload, ParameterOffloadStepsTheShardItselfAndOptimizerOffloadACopy) {
  accelerate::testing::run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    for (bool parameters : {true, false}) {
      torch::nn::Sequential model(torch::nn::Linear(8, 8), torch::nn::Linear(8, 8));
      accelerate::GradientReducer reducer(
          comm, model->parameters(),
          accelerate::GradientSyncOptions().bucket_cap_mb(1e-4).first_bucket_cap_mb(1e-4));
      const std::vector<int> unit_of = {0, 0, 1, 1};  // each Linear a unit
      accelerate::sharding::Offload offload;
      offload.parameters = parameters;
      offload.optimizer = !parameters;
      accelerate::sharding::ModelShards shards(comm, reducer, 3, unit_of, false, offload);
      for (std::size_t b = 0; b < reducer.buckets().size(); ++b) {
        EXPECT_TRUE(shards.offloaded(b));
        EXPECT_EQ(shards.optimizer_shard(b).is_same(shards.parameter_shard(b)), parameters)
            << "bucket " << b;
        EXPECT_FALSE(shards.optimizer_shard(b).is_alias_of(shards.parameter_buffer(b)));
      }
    }
  });
}

TEST(ZeroOffload, AccumulationClippingAndBf16MatchTheDeviceStep) {
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    Recipe recipe;
    recipe.accumulation = 3;
    recipe.clip = 0.05;
    recipe.bf16 = bf16;
    const auto on_device = train_on(2, recipe);
    recipe.offload = Offload::kParameters;
    expect_same(train_on(2, recipe), on_device);
  }
}

// A checkpoint loaded between steps reaches the host copies: a job that
// trains two steps, loads the checkpoint saved after step 4 and trains on
// to step 8 ends where the uninterrupted run does.
std::vector<at::Tensor> train_with_checkpoint(std::shared_ptr<Communicator> comm,
                                              const Recipe& recipe, const std::string& dir,
                                              bool resume) {
  Accelerator accelerator(std::move(comm), options_for(recipe));
  BlockStack model;
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                       torch::optim::AdamWOptions(0.01));
  accelerate::DataLoader loader(zero_data(240), accelerate::DataLoaderOptions(4));
  accelerator.prepare(model, optimizer, loader);
  const auto train_until = [&](int last_step) {
    for (auto& batch : loader) {
      if (static_cast<int>(accelerator.step()) >= last_step) break;
      auto scope = accelerator.accumulate();
      accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
      optimizer.step();
      optimizer.zero_grad();
      if (!resume && accelerator.step() == 4) accelerator.save_state(dir);
    }
  };
  if (resume) {
    train_until(2);
    accelerator.load_state(dir);
  }
  train_until(8);
  std::vector<at::Tensor> parameters;
  for (const auto& entry : accelerator.get_state_dict(model)) parameters.push_back(entry.second);
  return parameters;
}

TEST(ZeroOffload, ACheckpointLoadedBetweenStepsReachesTheHostCopies) {
  for (int world : {2, 1}) {
    for (Offload offload : {Offload::kOptimizer, Offload::kParameters}) {
      SCOPED_TRACE(std::to_string(world) + " processes, " +
                   (offload == Offload::kOptimizer ? "optimizer, stage 2" : "parameters, stage 3"));
      Recipe recipe;
      recipe.offload = offload;
      recipe.stage = offload == Offload::kOptimizer ? 2 : 3;
      accelerate::testing::TempDir dir("zero-offload-checkpoint");
      const std::string path = dir.path() + "/checkpoint";
      std::vector<std::vector<at::Tensor>> uninterrupted(world), resumed(world);
      accelerate::testing::run_rank_communicators(world, [&](std::shared_ptr<Communicator> comm) {
        const int rank = comm->rank();
        uninterrupted[rank] = train_with_checkpoint(comm, recipe, path, /*resume=*/false);
      });
      accelerate::testing::run_rank_communicators(world, [&](std::shared_ptr<Communicator> comm) {
        const int rank = comm->rank();
        resumed[rank] = train_with_checkpoint(comm, recipe, path, /*resume=*/true);
      });
      for (int r = 0; r < world; ++r) {
        expect_same_parameters(resumed[r], uninterrupted[r], "rank " + std::to_string(r));
      }
    }
  }
}

// ZeRO-Offload's main use: one GPU training a model whose optimizer state
// (or, at stage 3, whose weights) would not fit on it. One process's shards
// are its whole buckets, kept on the host; it trains as without offloading.
TEST(ZeroOffload, OneProcessOffloadsAndTrainsBitwiseAsWithout) {
  Recipe recipe;
  recipe.stage = 1;
  const auto on_device = train_on(1, recipe);
  EXPECT_TRUE(on_device[0].optimizer_steps_model_memory);
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE("optimizer offload, stage " + std::to_string(stage));
    recipe.stage = stage;
    recipe.offload = Offload::kOptimizer;
    const auto offloaded = train_on(1, recipe);
    expect_same(offloaded, on_device);
    EXPECT_FALSE(offloaded[0].optimizer_steps_model_memory);
    EXPECT_EQ(offloaded[0].units_released, stage == 3);
  }
  SCOPED_TRACE("parameter offload, stage 3");
  recipe.stage = 3;
  recipe.offload = Offload::kParameters;
  const auto offloaded = train_on(1, recipe);
  expect_same(offloaded, on_device);
  EXPECT_TRUE(offloaded[0].units_released);
  EXPECT_FALSE(offloaded[0].optimizer_steps_model_memory);
}

// Clipping's norm sums the gradients in another order than the plain step
// (over the flat buckets, not parameter by parameter): the clip factor can
// differ in its last bit, so these runs agree to fp32 rounding, ~1e-7 on
// weights of order 1 (seen: at most 1.2e-7), not bitwise.
TEST(ZeroOffload, OneProcessAccumulationClippingAndBf16MatchTheDeviceStep) {
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    Recipe recipe;
    recipe.accumulation = 3;
    recipe.clip = 0.05;
    recipe.bf16 = bf16;
    const auto on_device = train_on(1, recipe);
    recipe.offload = Offload::kParameters;
    expect_same(train_on(1, recipe), on_device, 1e-6);
  }
}

TEST(ZeroOffload, NotesSayWhatRuns) {
  Recipe recipe;
  recipe.offload = Offload::kParameters;
  ::testing::internal::CaptureStderr();
  train_on(2, recipe);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr("accelerate: note: offload_optimizer_device cpu and "
                             "offload_param_device cpu with ACCELERATE_OFFLOAD_ON_CPU_JOB: this "
                             "CPU-only job copies its shards to host memory and back"));
  recipe.stage = 0;
  recipe.offload = Offload::kOptimizer;
  ::testing::internal::CaptureStderr();
  const auto stage0 = train_on(2, recipe);
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err,
              HasSubstr("needs ZeRO's shards, which stage 0 (data parallelism) does not make"));
  EXPECT_TRUE(stage0[0].optimizer_steps_model_memory);
  recipe.stage = 3;
  recipe.offload = Offload::kParameters;
  recipe.copies_on_cpu = false;
  ::testing::internal::CaptureStderr();
  const auto unforced = train_on(2, recipe);
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr("changes nothing in a CPU-only job"));
  EXPECT_TRUE(unforced[0].optimizer_steps_model_memory);
}

}  // namespace zero_offload_test
