// DeepSpeed's zero.Init (zero3_init_flag): every process but the main one
// builds the model inside accelerator.zero3_init(), with no memory for its
// weights; prepare() gives each process its shard of the main process's
// weights and frees every unit until it runs. Training then equals data
// parallelism's (every process building the model itself) bitwise: sums are
// rank-ordered. Ranks are threads with real collectives.
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/common/errors.h"
#include "accelerate/memory/empty_weights.h"
#include "parallel/storage_release.h"
#include "sharding/zero_test_model.h"
#include "support/thread_ranks.h"

namespace zero3_init_test {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::DeepSpeedPlugin;
using accelerate::testing::BlockStack;
using accelerate::testing::Call;
using accelerate::testing::zero_data;

enum class Build { kWhole, kZero3Init, kEmptyOffMain };

struct Outcome {
  bool built_empty = false;  // the guard acted on this process
  bool units_free_after_prepare = false;
  std::vector<at::Tensor> weights;  // whole, after training
};

std::vector<Outcome> train(int world, const std::optional<DeepSpeedPlugin>& plugin, Build build) {
  std::vector<Outcome> outcomes(world);
  accelerate::testing::run_rank_communicators(world, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    Outcome& out = outcomes[rank];
    AcceleratorOptions options;
    options.deepspeed_plugin(plugin);
    Accelerator accelerator(std::move(comm), options);
    BlockStack model{nullptr};
    {
      std::optional<accelerate::EmptyWeightsGuard> guard;
      if (build == Build::kZero3Init) guard.emplace(accelerator.zero3_init());
      if (build == Build::kEmptyOffMain) guard.emplace(!accelerator.is_main_process());
      out.built_empty = guard && guard->active();
      model = BlockStack(Call::kUnitForward, 3, 32, 64);
    }
    accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                         torch::optim::AdamWOptions(0.01));
    accelerate::DataLoader loader(zero_data(64), accelerate::DataLoaderOptions(8));
    accelerator.prepare(model, optimizer, loader);
    out.units_free_after_prepare = true;
    for (const auto& p : model->blocks->parameters()) {
      out.units_free_after_prepare &= accelerate::detail::storage_released(p);
    }
    for (int epoch = 0; epoch < 2; ++epoch) {
      for (auto& batch : loader) {
        accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
        optimizer.step();
        optimizer.zero_grad();
      }
    }
    for (const auto& entry : accelerator.get_state_dict(model)) out.weights.push_back(entry.second);
  });
  return outcomes;
}

void expect_same_weights(const std::vector<Outcome>& got, const std::vector<Outcome>& want) {
  ASSERT_EQ(got.size(), want.size());
  BlockStack initial(Call::kUnitForward, 3, 32, 64);
  ASSERT_FALSE(at::equal(want[0].weights[0], initial->parameters()[0])) << "nothing trained";
  for (std::size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].weights.size(), want[r].weights.size());
    for (std::size_t i = 0; i < got[r].weights.size(); ++i) {
      EXPECT_TRUE(at::equal(got[r].weights[i], want[r].weights[i])) << "rank " << r << ", " << i;
    }
  }
}

DeepSpeedPlugin stage3(bool init_flag) {
  return DeepSpeedPlugin().zero_stage(3).zero3_init_flag(init_flag).gradient_clipping(std::nullopt);
}

TEST(Zero3Init, ModelsBuiltEmptyOffTheMainProcessTrainAsDataParallelism) {
  for (int world : {2, 3}) {
    SCOPED_TRACE("processes: " + std::to_string(world));
    const auto reference = train(world, std::nullopt, Build::kWhole);
    const auto sharded = train(world, stage3(true), Build::kZero3Init);
    expect_same_weights(sharded, reference);
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(sharded[r].built_empty, r != 0) << "rank " << r;
      EXPECT_TRUE(sharded[r].units_free_after_prepare) << "rank " << r;
    }
  }
}

// Without the flag (or below stage 3) the guard acts nowhere, and units stay
// whole until they first run, as before.
TEST(Zero3Init, WithoutTheFlagOrBelowStageThreeTheGuardChangesNothing) {
  for (const auto& plugin :
       {stage3(false), DeepSpeedPlugin().zero_stage(2).zero3_init_flag(true)}) {
    const auto outcomes = train(2, plugin, Build::kZero3Init);
    for (int r = 0; r < 2; ++r) {
      EXPECT_FALSE(outcomes[r].built_empty) << "rank " << r;
      EXPECT_FALSE(outcomes[r].units_free_after_prepare) << "rank " << r;
    }
  }
}

// Data parallelism fills a model built empty off the main process too
// (prepare() broadcasts the main process's weights), at full memory.
TEST(Zero3Init, DataParallelismFillsModelsBuiltEmpty) {
  const auto reference = train(2, std::nullopt, Build::kWhole);
  const auto filled = train(2, std::nullopt, Build::kEmptyOffMain);
  EXPECT_TRUE(filled[1].built_empty);
  expect_same_weights(filled, reference);
}

// A buffer computed inside the guard is a meta tensor (operations there give
// no values): every process gets one error naming it, none waits.
struct MaskedImpl : torch::nn::Module {
  MaskedImpl() : layer(register_module("layer", torch::nn::Linear(4, 4))) {
    mask = register_buffer("mask", torch::ones({4, 4}).tril());
  }
  torch::nn::Linear layer;
  torch::Tensor mask;
};
TORCH_MODULE(Masked);

TEST(Zero3Init, ATensorComputedInsideTheGuardIsAnErrorOnEveryProcess) {
  std::vector<std::string> errors(2);
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    Accelerator accelerator(std::move(comm), AcceleratorOptions().deepspeed_plugin(stage3(true)));
    Masked model{nullptr};
    {
      auto init = accelerator.zero3_init();
      model = Masked();
    }
    try {
      accelerator.prepare(model);
    } catch (const accelerate::Error& e) {
      errors[rank] = e.what();
    }
  });
  for (const auto& error : errors) {
    EXPECT_NE(error.find("buffer 'mask' is a meta tensor"), std::string::npos) << error;
  }
}

}  // namespace zero3_init_test
