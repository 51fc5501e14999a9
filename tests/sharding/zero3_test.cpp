// ZeRO stage 3 trains exactly as data parallelism (stage 0) does, while the
// parameters of each unit hold memory only while the unit runs. The model
// is a stack of residual blocks called through accelerate::unit_forward (or
// checkpoint_activations, or directly); DeepSpeed's stage 3 finds its units
// by itself (the repeated blocks). Ranks are threads with real collectives;
// sums are rank-ordered (shared memory), so equality is bitwise except
// where a bound is given.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/common/errors.h"
#include "accelerate/memory/activation_checkpointing.h"
#include "accelerate/memory/empty_weights.h"
#include "accelerate/sharding/unit_forward.h"
#include "parallel/storage_release.h"
#include "sharding/parameter_units.h"
#include "sharding/zero_test_model.h"
#include "sharding/zero_test_support.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

namespace zero3_test {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::DeepSpeedPlugin;
using accelerate::testing::zero_data;

using accelerate::testing::BlockStack;
using accelerate::testing::Call;
using accelerate::testing::ResidualBlockImpl;

struct Recipe {
  int stage = 0;
  Call call = Call::kUnitForward;
  int accumulation = 1;
  double clip = 0;
  bool bf16 = false;
  std::string deepspeed_file;        // hf_ds_config (its stage and clipping win)
  bool freeze_middle_block = false;  // its first layer: frozen parameters inside a unit
  bool unused_block = false;         // skip_last_block_every_other_call
};

struct Outcome {
  std::vector<at::Tensor> parameters;
  int64_t optimizer_state_elements = 0;
  bool units_released = false;  // every block parameter without memory after training
  bool root_whole = false;      // the parameters outside the blocks with theirs
  at::Tensor eval_no_grad, eval_inference;
};

AcceleratorOptions options_for(const Recipe& recipe) {
  AcceleratorOptions options;
  options.ddp_options(
      accelerate::GradientSyncOptions().bucket_cap_mb(0.002).first_bucket_cap_mb(0.0005));
  if (!recipe.deepspeed_file.empty()) {
    options.deepspeed_plugin(DeepSpeedPlugin().hf_ds_config(recipe.deepspeed_file));
  } else if (recipe.stage > 0) {
    options.deepspeed_plugin(
        DeepSpeedPlugin().zero_stage(recipe.stage).gradient_clipping(std::nullopt));
  }
  options.gradient_accumulation_steps(recipe.accumulation);
  if (recipe.bf16) options.mixed_precision(accelerate::MixedPrecision::kBF16);
  return options;
}

Outcome train(std::shared_ptr<Communicator> comm, const Recipe& recipe) {
  Accelerator accelerator(std::move(comm), options_for(recipe));
  BlockStack model(recipe.call);
  model->skip_last_block_every_other_call = recipe.unused_block;
  if (recipe.freeze_middle_block) {
    for (auto& p : model->blocks[1]->as<ResidualBlockImpl>()->up->parameters()) {
      p.set_requires_grad(false);
    }
  }
  accelerate::Optimizer<torch::optim::AdamW> optimizer(
      model->parameters(), torch::optim::AdamWOptions(0.01).weight_decay(0.05));
  accelerate::DataLoader loader(zero_data(96), accelerate::DataLoaderOptions(8));
  accelerator.prepare(model, optimizer, loader);
  accelerate::testing::train_epochs(accelerator, model, optimizer, loader, recipe.clip);
  Outcome outcome;
  outcome.units_released = accelerate::testing::all_released(model->blocks->parameters());
  outcome.root_whole = !accelerate::detail::storage_released(model->input->weight) &&
                       !accelerate::detail::storage_released(model->shared);
  const auto probe = zero_data(8).get(0).data.reshape({1, 4});
  model->eval();
  {
    torch::NoGradGuard no_grad;
    outcome.eval_no_grad = model->forward(probe).clone();
  }
  {
    c10::InferenceMode inference;
    outcome.eval_inference = model->forward(probe).clone();
  }
  outcome.parameters = accelerate::testing::whole_weights(accelerator, *model);
  outcome.optimizer_state_elements = accelerate::testing::optimizer_state_elements(optimizer);
  return outcome;
}

std::vector<Outcome> train_on(int world, const Recipe& recipe) {
  return accelerate::testing::on_each_rank<Outcome>(
      world, [&](std::shared_ptr<Communicator> comm) { return train(comm, recipe); });
}

void expect_same(const std::vector<Outcome>& got, const std::vector<Outcome>& want, double rtol = 0,
                 double atol = 0) {
  ASSERT_EQ(got.size(), want.size());
  BlockStack initial;
  ASSERT_FALSE(want[0].parameters.empty());
  EXPECT_FALSE(at::allclose(want[0].parameters[0], initial->parameters()[0]))
      << "training did not move the parameters: the comparison would prove nothing";
  for (std::size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].parameters.size(), want[r].parameters.size());
    for (std::size_t i = 0; i < got[r].parameters.size(); ++i) {
      const at::Tensor& a = got[r].parameters[i];
      const at::Tensor& b = want[r].parameters[i];
      const bool same = rtol == 0 && atol == 0 ? at::equal(a, b) : at::allclose(a, b, rtol, atol);
      EXPECT_TRUE(same) << "rank " << r << ", parameter " << i << ": max difference "
                        << (a - b).abs().max().item<double>();
    }
  }
}

TEST(Zero3, TrainsBitwiseAsDataParallelismWithUnitsFreedAndStateForTheShardOnly) {
  for (int world : {2, 3}) {
    SCOPED_TRACE(std::to_string(world) + " ranks");
    Recipe recipe;
    const auto reference = train_on(world, recipe);
    recipe.stage = 3;
    const auto sharded = train_on(world, recipe);
    expect_same(sharded, reference);
    int64_t total = 0, parameters = 0;
    for (const auto& p : reference[0].parameters) parameters += p.numel();
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(sharded[r].units_released) << "rank " << r;
      EXPECT_TRUE(sharded[r].root_whole) << "rank " << r;
      EXPECT_FALSE(reference[r].units_released) << "rank " << r;
      EXPECT_LE(sharded[r].optimizer_state_elements, parameters / world + 64) << "rank " << r;
      total += sharded[r].optimizer_state_elements;
      // Evaluation gathers the units under NoGradGuard and InferenceMode.
      EXPECT_TRUE(at::equal(sharded[r].eval_no_grad, reference[r].eval_no_grad)) << "rank " << r;
      EXPECT_TRUE(at::equal(sharded[r].eval_inference, reference[r].eval_inference))
          << "rank " << r;
    }
    EXPECT_EQ(total, parameters) << "every element has its state on exactly one rank";
  }
}

// (No dropout: ranks that are threads share LibTorch's CPU generator.)
TEST(Zero3, CheckpointedUnitsTrainBitwiseAsDataParallelism) {
  Recipe recipe;
  recipe.call = Call::kCheckpoint;
  const auto reference = train_on(2, recipe);
  recipe.stage = 3;
  const auto sharded = train_on(2, recipe);
  expect_same(sharded, reference);
  EXPECT_TRUE(sharded[0].units_released);
}

TEST(Zero3, AModelThatCallsItsBlocksDirectlyTrainsAsAtStageTwo) {
  Recipe recipe;
  recipe.call = Call::kDirect;
  const auto reference = train_on(2, recipe);
  recipe.stage = 3;
  const auto sharded = train_on(2, recipe);
  expect_same(sharded, reference);
  EXPECT_FALSE(sharded[0].units_released) << "units that never ran through unit_forward stay whole";
}

TEST(Zero3, AccumulationAndClippingMatchDataParallelism) {
  Recipe recipe;
  recipe.accumulation = 3;
  recipe.clip = 0.05;
  const auto reference = train_on(2, recipe);
  recipe.stage = 3;
  // The clip's norm is combined from shards in double (LibTorch's in float).
  expect_same(train_on(2, recipe), reference, 1e-5, 1e-5);
}

TEST(Zero3, FrozenAndUnusedParametersInUnitsMatchDataParallelism) {
  for (int world : {2, 3}) {
    SCOPED_TRACE(std::to_string(world) + " ranks");
    Recipe recipe;
    recipe.freeze_middle_block = true;
    recipe.unused_block = true;
    const auto reference = train_on(world, recipe);
    recipe.stage = 3;
    const auto sharded = train_on(world, recipe);
    expect_same(sharded, reference);
    // The frozen layer is whole (it is in no bucket); the rest of the units is freed.
    EXPECT_FALSE(sharded[0].units_released);
  }
}

TEST(Zero3, Bf16AutocastMatchesDataParallelism) {
  Recipe recipe;
  recipe.bf16 = true;
  const auto reference = train_on(2, recipe);
  recipe.stage = 3;
  expect_same(train_on(2, recipe), reference);
}

// Trains BlockStack for `steps` steps in all; with `resume_from`, loads
// that checkpoint first (on any number of processes); with `save_after`,
// saves to `save_to` after that many steps. Returns the parameters.
struct CheckpointRun {
  int stage = 3;
  int steps = 8;
  int save_after = -1;
  std::string save_to, resume_from;
};

std::vector<at::Tensor> train_with_checkpoint(std::shared_ptr<Communicator> comm,
                                              const CheckpointRun& run) {
  Recipe recipe;
  recipe.stage = run.stage;
  Accelerator accelerator(std::move(comm), options_for(recipe));
  BlockStack model;
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                       torch::optim::AdamWOptions(0.01));
  accelerate::DataLoader loader(zero_data(240), accelerate::DataLoaderOptions(4));
  accelerator.prepare(model, optimizer, loader);
  int step = 0;
  if (!run.resume_from.empty()) {
    accelerator.load_state(run.resume_from);
    step = static_cast<int>(accelerator.step());
  }
  while (step < run.steps) {
    for (auto& batch : loader) {
      auto scope = accelerator.accumulate();
      accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
      optimizer.step();
      optimizer.zero_grad();
      if (++step == run.save_after) accelerator.save_state(run.save_to);
      if (step == run.steps) break;
    }
  }
  std::vector<at::Tensor> parameters;
  for (const auto& entry : accelerator.get_state_dict(model)) parameters.push_back(entry.second);
  return parameters;
}

std::vector<std::vector<at::Tensor>> run_checkpointed(int world, const CheckpointRun& run) {
  std::vector<std::vector<at::Tensor>> out(world);
  accelerate::testing::run_rank_communicators(world, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    out[rank] = train_with_checkpoint(comm, run);
  });
  return out;
}

// A stage-3 checkpoint saved by 2 processes resumes on 2 (exactly where the
// uninterrupted run ends), 3 and 1 processes; stage 2 trains bitwise as
// stage 3 does, so its resharded resumes are the reference.
TEST(Zero3Checkpoint, SavedOnTwoResumesOnTwoThreeAndOneExactly) {
  std::map<int, std::string> dirs;
  std::map<int, std::map<int, std::vector<at::Tensor>>> resumed;  // stage -> world -> rank 0's
  std::vector<at::Tensor> uninterrupted;
  for (int stage : {2, 3}) {
    accelerate::testing::TempDir dir("zero3-checkpoint");
    CheckpointRun saving;
    saving.stage = stage;
    saving.save_after = 4;
    saving.save_to = dir.path() + "/checkpoint";
    const auto whole = run_checkpointed(2, saving);
    if (stage == 3) uninterrupted = whole[0];
    for (int world : {2, 3, 1}) {
      CheckpointRun resuming;
      resuming.stage = stage;
      resuming.resume_from = saving.save_to;
      resumed[stage][world] = run_checkpointed(world, resuming)[0];
    }
  }
  const auto expect_equal = [](const std::vector<at::Tensor>& got,
                               const std::vector<at::Tensor>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(at::equal(got[i], want[i])) << what << ", parameter " << i;
    }
  };
  expect_equal(resumed[3][2], uninterrupted, "stage 3 resumed on 2 processes");
  expect_equal(resumed[3][3], resumed[2][3], "stage 3 vs stage 2 resumed on 3 processes");
  expect_equal(resumed[3][1], resumed[2][1], "stage 3 vs stage 2 resumed on 1 process");
}

// Hugging Face Accelerate's stage-3 templates: with their fp16 on, a CPU job
// gets the usual fp16 error; with fp16 switched off in a copy, they train at
// stage 3 ("auto" clipping = 1.0) as data parallelism clipping at 1.0 does.
TEST(Zero3Templates, LoadRefuseFp16OnTheCpuAndTrainWithoutIt) {
  for (const char* name : {"zero_stage3_config.json", "zero_stage3_offload_config.json"}) {
    SCOPED_TRACE(name);
    const std::string path =
        std::string(ACCELERATE_SOURCE_DIR) + "/tests/sharding/fixtures/" + name;
    accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
      try {
        Accelerator accelerator(
            comm, AcceleratorOptions().deepspeed_plugin(DeepSpeedPlugin().hf_ds_config(path)));
        ADD_FAILURE() << "no error";
      } catch (const accelerate::ConfigError& error) {
        EXPECT_THAT(error.what(), ::testing::HasSubstr("'fp16' needs a CUDA device"));
      }
    });
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto fp16 = text.find("\"fp16\"");
    const auto enabled = text.find("true", fp16);
    ASSERT_NE(fp16, std::string::npos);
    ASSERT_NE(enabled, std::string::npos);
    text.replace(enabled, 4, "false");
    accelerate::testing::TempDir dir("zero3-template");
    const std::string copy = dir.path() + "/" + name;
    std::ofstream(copy) << text;

    Recipe recipe;
    recipe.clip = 1.0;
    const auto reference = train_on(2, recipe);
    recipe.clip = 0;
    recipe.deepspeed_file = copy;
    const auto sharded = train_on(2, recipe);
    expect_same(sharded, reference, 1e-5, 1e-5);
    EXPECT_TRUE(sharded[0].units_released);
  }
}

// zero3_init_flag tells the program what to do, once, on the main process,
// when prepare() sees a model that was built outside zero3_init(); a model
// built inside it (as the Trainer's model_init is) needs no note.
TEST(Zero3Notes, InitFlagIsNotedForModelsBuiltOutsideZero3Init) {
  const auto stderr_of = [](bool inside) {
    ::testing::internal::CaptureStderr();
    accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
      Accelerator accelerator(
          comm,
          AcceleratorOptions().deepspeed_plugin(
              DeepSpeedPlugin().zero_stage(3).zero3_init_flag(true).zero3_save_16bit_model(true)));
      BlockStack model{nullptr};
      {
        std::optional<accelerate::EmptyWeightsGuard> guard;
        if (inside) guard.emplace(accelerator.zero3_init());
        model = BlockStack(Call::kUnitForward, 2, 8, 16);
      }
      accelerator.prepare(model);
    });
    return ::testing::internal::GetCapturedStderr();
  };
  const std::string init =
      "accelerate: note: zero3_init_flag: build the model inside accelerator.zero3_init()";
  const std::string err = stderr_of(/*inside=*/false);
  EXPECT_NE(err.find(init), std::string::npos) << err;
  EXPECT_EQ(err.find(init), err.rfind(init)) << "once, not per process: " << err;
  EXPECT_EQ(err.find("zero3_save_16bit_model"), std::string::npos)
      << "honoured, not noted: " << err;
  EXPECT_EQ(stderr_of(/*inside=*/true).find(init), std::string::npos);
}

TEST(Zero3, RunningAFreedUnitAfterItsAcceleratorWentIsAClearError) {
  accelerate::testing::run_rank_communicators(2, [](std::shared_ptr<Communicator> comm) {
    BlockStack model;
    {
      Recipe recipe;
      recipe.stage = 3;
      Accelerator accelerator(comm, options_for(recipe));
      accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                           torch::optim::AdamWOptions(0.01));
      accelerator.prepare(model, optimizer);
      torch::NoGradGuard no_grad;
      model->forward(torch::ones({1, 4}));  // runs the units, which frees them
      EXPECT_TRUE(accelerate::testing::all_released(model->blocks->parameters()));
    }
    try {
      model->forward(torch::ones({1, 4}));
      ADD_FAILURE() << "no error";
    } catch (const accelerate::Error& error) {
      EXPECT_THAT(error.what(), ::testing::HasSubstr("an Accelerator that no longer exists"));
    }
  });
}

TEST(Zero3, UnitsAreTheRepeatedBlocksAndTheRestStaysOutside) {
  BlockStack model;
  std::vector<torch::nn::Module*> blocks;
  for (const auto& block : *model->blocks) blocks.push_back(block.get());
  const auto unit_of = accelerate::sharding::parameter_units(*model, blocks);
  const auto named = model->named_parameters();
  ASSERT_EQ(unit_of.size(), named.size());
  for (std::size_t i = 0; i < named.size(); ++i) {
    const std::string& name = named[i].key();
    const int want = name.rfind("blocks.", 0) == 0 ? name[7] - '0' : -1;
    EXPECT_EQ(unit_of[i], want) << name;
  }
}

}  // namespace zero3_test
