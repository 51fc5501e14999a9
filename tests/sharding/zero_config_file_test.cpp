// A DeepSpeed JSON config file at run time: what the Accelerator takes from
// it (clipping, precision) and how prepare() checks it against the program
// (batch sizes, the optimizer and scheduler sections), as Accelerate's
// prepare() does. Also DeepSpeed's default clipping at 1.0. Ranks are
// threads with real collectives; every process must fail the same way.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/common/errors.h"
#include "sharding/zero_test_model.h"
#include "support/thread_ranks.h"

namespace zero_config_file {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::DeepSpeedPlugin;
using accelerate::MixedPrecision;
using accelerate::testing::ZeroNet;
using ::testing::HasSubstr;

// Writes `json` to a file of its own and returns the path.
std::string config_file(const std::string& name, const std::string& json) {
  const std::string path = ::testing::TempDir() + "zero_config_file_" + name + ".json";
  std::ofstream(path) << json;
  return path;
}

// A stage-2 file with `extra` top-level keys.
std::string stage2_file(const std::string& name, const std::string& extra) {
  return config_file(name, R"({"zero_optimization": {"stage": 2},
      "train_micro_batch_size_per_gpu": "auto")" +
                               (extra.empty() ? "" : ", " + extra) + "}");
}

// One epoch of SGD on 2 ranks, the loss scaled up so that gradients are
// large enough for clipping at 1.0 to matter. Returns rank 0's parameters.
std::vector<at::Tensor> train(const AcceleratorOptions& options) {
  std::vector<at::Tensor> result;
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    Accelerator accelerator(comm, options);
    ZeroNet model;
    accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                       torch::optim::SGDOptions(0.01));
    accelerate::DataLoader loader(accelerate::testing::zero_data(64),
                                  accelerate::DataLoaderOptions(8));
    accelerator.prepare(model, optimizer, loader);
    for (auto& batch : loader) {
      accelerator.backward(50 * torch::mse_loss(model->forward(batch.data, true), batch.target));
      optimizer.step();
      optimizer.zero_grad();
    }
    if (comm->rank() != 0) return;
    for (const auto& p : model->parameters()) result.push_back(p.detach().clone());
  });
  return result;
}

bool same(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!at::equal(a[i], b[i])) return false;
  }
  return true;
}

AcceleratorOptions with_plugin(const DeepSpeedPlugin& plugin) {
  return AcceleratorOptions().deepspeed_plugin(plugin);
}

// The message prepare() throws on every one of 2 ranks ("" for none), or
// "differs" when the ranks disagree.
std::string prepare_error(const AcceleratorOptions& options, bool loader_with_optimizer) {
  std::vector<std::string> errors(2);
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    Accelerator accelerator(comm, options);
    ZeroNet model;
    accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                       torch::optim::SGDOptions(0.01));
    accelerate::DataLoader loader(accelerate::testing::zero_data(64),
                                  accelerate::DataLoaderOptions(8));
    try {
      if (loader_with_optimizer) {
        accelerator.prepare(model, optimizer, loader);
      } else {
        accelerator.prepare(model, optimizer);
        accelerator.prepare(loader);
      }
    } catch (const accelerate::ConfigError& error) {
      errors[rank] = error.what();
    }
  });
  return errors[0] == errors[1] ? errors[0] : "differs";
}

TEST(ZeroConfigFile, DeepSpeedClipsAtOneByDefaultAndFsdpDoesNot) {
  const auto by_default = train(with_plugin(DeepSpeedPlugin().zero_stage(2)));
  const auto at_one = train(with_plugin(DeepSpeedPlugin().zero_stage(2).gradient_clipping(1.0)));
  const auto unclipped =
      train(with_plugin(DeepSpeedPlugin().zero_stage(2).gradient_clipping(std::nullopt)));
  EXPECT_TRUE(same(by_default, at_one));
  ASSERT_FALSE(same(at_one, unclipped))
      << "clipping at 1.0 changed nothing: the test proves nothing";
  EXPECT_TRUE(
      same(train(with_plugin(DeepSpeedPlugin().zero_stage(2).gradient_clipping(0))), unclipped));
  const accelerate::Environment fsdp_launch = {{"ACCELERATE_USE_FSDP", "true"},
                                               {"FSDP_SHARDING_STRATEGY", "SHARD_GRAD_OP"}};
  const auto fsdp = train(AcceleratorOptions().environment(fsdp_launch));
  EXPECT_TRUE(same(fsdp, unclipped));
}

TEST(ZeroConfigFile, AutoClippingIsOneAndAFileWithoutTheKeyDoesNotClip) {
  const auto unclipped =
      train(with_plugin(DeepSpeedPlugin().zero_stage(2).gradient_clipping(std::nullopt)));
  const auto at_one = train(with_plugin(DeepSpeedPlugin().zero_stage(2).gradient_clipping(1.0)));
  const auto auto_file = stage2_file("auto_clip", R"("gradient_clipping": "auto")");
  EXPECT_TRUE(same(train(with_plugin(DeepSpeedPlugin().hf_ds_config(auto_file))), at_one));
  const auto no_key = stage2_file("no_clip", "");
  EXPECT_TRUE(same(train(with_plugin(DeepSpeedPlugin().hf_ds_config(no_key))), unclipped));
}

TEST(ZeroConfigFile, ATrainBatchSizeThatContradictsTheLoaderIsRefusedInPrepare) {
  const auto file = stage2_file("batch", R"("train_batch_size": 64)");
  EXPECT_EQ(prepare_error(with_plugin(DeepSpeedPlugin().hf_ds_config(file)), true),
            file +
                ": train_batch_size is 64 but train_micro_batch_size_per_gpu * "
                "gradient_accumulation_steps * world size is 8 * 1 * 2 = 16");
  const auto right = stage2_file("batch_right", R"("train_batch_size": 16)");
  EXPECT_EQ(prepare_error(with_plugin(DeepSpeedPlugin().hf_ds_config(right)), true), "");
}

TEST(ZeroConfigFile, AnAutoMicroBatchNeedsTheLoaderPreparedWithTheOptimizer) {
  const auto file = stage2_file("micro", "");
  EXPECT_THAT(prepare_error(with_plugin(DeepSpeedPlugin().hf_ds_config(file)), false),
              HasSubstr("train_micro_batch_size_per_gpu is \"auto\" but the program prepared no "
                        "data loader before or with its optimizer"));
  EXPECT_EQ(prepare_error(with_plugin(DeepSpeedPlugin().hf_ds_config(file)), true), "");
}

TEST(ZeroConfigFile, TheProgramsOptimizerRunsAndTheFilesSectionsAreReported) {
  const auto plain = stage2_file("plain", R"("gradient_clipping": 0.5)");
  const auto sections = stage2_file("sections", R"("gradient_clipping": 0.5,
      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": 0.1}},
      "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": "auto"}})");
  const auto expected = train(with_plugin(DeepSpeedPlugin().hf_ds_config(plain)));
  ::testing::internal::CaptureStderr();
  const auto with_sections = train(with_plugin(DeepSpeedPlugin().hf_ds_config(sections)));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(same(with_sections, expected));
  EXPECT_THAT(err, HasSubstr(sections + ": the optimizer section (AdamW) is not used"));
  EXPECT_THAT(err, HasSubstr(sections + ": the scheduler section (WarmupDecayLR) is not used"));
}

TEST(ZeroConfigFile, ADisabledFp16SectionWinsOverMixedPrecisionFp16) {
  // fp16 on a CPU is refused, unless the file switches it off: DeepSpeed
  // then trains in fp32, and so does the Accelerator.
  const auto file = stage2_file("fp16_off", R"("fp16": {"enabled": false})");
  accelerate::testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    ::testing::internal::CaptureStderr();
    Accelerator accelerator(comm, AcceleratorOptions()
                                      .cpu(true)
                                      .mixed_precision(MixedPrecision::kFP16)
                                      .deepspeed_plugin(DeepSpeedPlugin().hf_ds_config(file)));
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(accelerator.mixed_precision(), MixedPrecision::kNo);
    EXPECT_THAT(err, HasSubstr("fp16.enabled is false but mixed_precision is fp16; the file wins"));
  });
}

}  // namespace zero_config_file
