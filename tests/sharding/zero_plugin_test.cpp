// Where the Accelerator's ZeRO setting comes from and what its fields do:
// the variables `accelerate launch` sets (DeepSpeed or FSDP), a DeepSpeed
// JSON file, gradient_clipping at every step, gradient_accumulation_steps,
// offloading on a CPU job. Ranks are threads with real collectives.
#include <torch/torch.h>

#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <string>
#include <vector>

#include "accelerate/accelerator.h"
#include "accelerate/errors.h"
#include "compat/optim_compat.h"
#include "sharding/zero_test_model.h"
#include "support/thread_ranks.h"

namespace {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::DeepSpeedPlugin;
using accelerate::Environment;
using accelerate::testing::ZeroNet;
using ::testing::HasSubstr;

struct PluginRun {
  std::vector<at::Tensor> parameters;
  std::string distributed_type;
  int64_t state_elements = 0;  // optimizer state on this rank
  int64_t total_elements = 0;
};

// Two epochs of SGD with momentum on rank's data; `clip`: the program calls
// clip_grad_norm_ itself; `accumulate`: the loop uses accumulate().
PluginRun plugin_run(std::shared_ptr<Communicator> comm, AcceleratorOptions options,
                     double clip = 0, bool with_scheduler = false) {
  options.ddp_options(
      accelerate::GradientSyncOptions().bucket_cap_mb(0.002).first_bucket_cap_mb(0.0005));
  Accelerator accelerator(std::move(comm), options);
  ZeroNet model;
  accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                     torch::optim::SGDOptions(0.05).momentum(0.9));
  accelerate::DataLoader loader(accelerate::testing::zero_data(96),
                                accelerate::DataLoaderOptions(8));
  accelerate::Scheduler<torch::optim::StepLR> scheduler(optimizer, /*step_size=*/2, /*gamma=*/0.5);
  accelerator.prepare(model, optimizer, loader);
  if (with_scheduler) accelerator.prepare(scheduler);
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (auto& batch : loader) {
      auto scope = accelerator.accumulate();
      accelerator.backward(torch::mse_loss(model->forward(batch.data, true), batch.target));
      if (clip > 0 && accelerator.sync_gradients()) {
        accelerator.clip_grad_norm_(model->parameters(), clip);
      }
      optimizer.step();
      if (with_scheduler) scheduler.step();
      optimizer.zero_grad();
    }
  }
  PluginRun run;
  run.distributed_type = accelerator.distributed_type();
  for (const auto& p : model->parameters()) {
    run.parameters.push_back(p.detach().clone());
    run.total_elements += p.numel();
  }
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (accelerate::compat::param_state(optimizer, p)) run.state_elements += p.numel();
    }
  }
  return run;
}

std::vector<PluginRun> on_two_ranks(
    const std::function<PluginRun(std::shared_ptr<Communicator>)>& body) {
  std::vector<PluginRun> runs(2);
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    runs[rank] = body(comm);
  });
  return runs;
}

void expect_equal_runs(const std::vector<PluginRun>& a, const std::vector<PluginRun>& b) {
  for (std::size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(a[r].parameters.size(), b[r].parameters.size());
    for (std::size_t i = 0; i < a[r].parameters.size(); ++i) {
      EXPECT_TRUE(at::equal(a[r].parameters[i], b[r].parameters[i]))
          << "rank " << r << ", parameter " << i;
    }
  }
}

TEST(ZeroPlugin, TheLaunchersDeepSpeedVariablesShardTheOptimizer) {
  const Environment env = {{"ACCELERATE_USE_DEEPSPEED", "true"},
                           {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "2"}};
  const auto from_env = on_two_ranks(
      [&](auto comm) { return plugin_run(comm, AcceleratorOptions().environment(env)); });
  const auto explicit_plugin = on_two_ranks([&](auto comm) {
    return plugin_run(comm, AcceleratorOptions().deepspeed_plugin(DeepSpeedPlugin().zero_stage(2)));
  });
  for (const auto& run : from_env) {
    EXPECT_EQ(run.distributed_type, "DEEPSPEED");
    EXPECT_LT(run.state_elements, run.total_elements) << "the optimizer state is not sharded";
  }
  expect_equal_runs(from_env, explicit_plugin);
}

TEST(ZeroPlugin, FsdpShardGradOpIsStageTwoAndFullShardIsRefused) {
  const Environment env = {{"ACCELERATE_USE_FSDP", "true"},
                           {"FSDP_SHARDING_STRATEGY", "SHARD_GRAD_OP"}};
  const auto runs = on_two_ranks(
      [&](auto comm) { return plugin_run(comm, AcceleratorOptions().environment(env)); });
  for (const auto& run : runs) {
    EXPECT_EQ(run.distributed_type, "FSDP");
    EXPECT_LT(run.state_elements, run.total_elements);
  }
  accelerate::testing::run_rank_communicators(1, [](std::shared_ptr<Communicator> comm) {
    const Environment full = {{"ACCELERATE_USE_FSDP", "true"},
                              {"FSDP_SHARDING_STRATEGY", "FULL_SHARD"}};
    try {
      Accelerator accelerator(comm, AcceleratorOptions().environment(full));
      ADD_FAILURE() << "no error";
    } catch (const accelerate::ConfigError& error) {
      EXPECT_THAT(error.what(), HasSubstr("FULL_SHARD"));
    }
  });
}

TEST(ZeroPlugin, GradientClippingClipsEveryStepAsAnExplicitCallDoes) {
  const auto by_plugin = on_two_ranks([&](auto comm) {
    return plugin_run(comm, AcceleratorOptions().deepspeed_plugin(
                                DeepSpeedPlugin().zero_stage(2).gradient_clipping(0.05)));
  });
  const DeepSpeedPlugin unclipping =
      DeepSpeedPlugin().zero_stage(2).gradient_clipping(std::nullopt);
  const auto by_call = on_two_ranks([&](auto comm) {
    return plugin_run(comm, AcceleratorOptions().deepspeed_plugin(unclipping), /*clip=*/0.05);
  });
  const auto unclipped = on_two_ranks([&](auto comm) {
    return plugin_run(comm, AcceleratorOptions().deepspeed_plugin(unclipping));
  });
  expect_equal_runs(by_plugin, by_call);
  EXPECT_FALSE(at::equal(by_plugin[0].parameters[0], unclipped[0].parameters[0]))
      << "clipping at 0.05 changed nothing: the comparison proves nothing";
}

TEST(ZeroPlugin, ItsGradientAccumulationStepsWin) {
  const auto by_plugin = on_two_ranks([&](auto comm) {
    return plugin_run(comm, AcceleratorOptions().gradient_accumulation_steps(1).deepspeed_plugin(
                                DeepSpeedPlugin().zero_stage(1).gradient_accumulation_steps(3)));
  });
  const auto by_options = on_two_ranks([&](auto comm) {
    return plugin_run(comm, AcceleratorOptions().gradient_accumulation_steps(3).deepspeed_plugin(
                                DeepSpeedPlugin().zero_stage(1)));
  });
  expect_equal_runs(by_plugin, by_options);
}

// The learning rate a scheduler sets reaches the groups that now hold the
// shards: training follows data parallelism with the same schedule, and
// differs from training without it.
TEST(ZeroPlugin, SchedulersDriveTheShardedGroups) {
  // Data parallelism does not clip, so neither does the sharded run here.
  const DeepSpeedPlugin unclipping =
      DeepSpeedPlugin().zero_stage(2).gradient_clipping(std::nullopt);
  const auto sharded = on_two_ranks([&](auto comm) {
    return plugin_run(comm, AcceleratorOptions().deepspeed_plugin(unclipping), 0,
                      /*with_scheduler=*/true);
  });
  const auto data_parallel = on_two_ranks([&](auto comm) {
    return plugin_run(comm, AcceleratorOptions(), 0, /*with_scheduler=*/true);
  });
  const auto unscheduled = on_two_ranks([&](auto comm) {
    return plugin_run(comm, AcceleratorOptions().deepspeed_plugin(unclipping));
  });
  expect_equal_runs(sharded, data_parallel);
  EXPECT_FALSE(at::equal(sharded[0].parameters[0], unscheduled[0].parameters[0]));
}

TEST(ZeroPlugin, AcceleratesZeroTwoTemplateAsksForFp16WhichTheCpuRefusesClearly) {
  accelerate::testing::run_rank_communicators(1, [](std::shared_ptr<Communicator> comm) {
    const std::string file =
        std::string(ACCELERATE_SOURCE_DIR) + "/tests/sharding/fixtures/zero_stage2_config.json";
    try {
      Accelerator accelerator(comm, AcceleratorOptions().cpu(true).deepspeed_plugin(
                                        DeepSpeedPlugin().hf_ds_config(file)));
      ADD_FAILURE() << "no error";
    } catch (const accelerate::ConfigError& error) {
      EXPECT_THAT(error.what(), HasSubstr("mixed_precision 'fp16' needs a CUDA device"));
    }
  });
}

TEST(ZeroPlugin, OffloadingTheOptimizerOnACpuJobChangesNothingAndSaysSo) {
  ::testing::internal::CaptureStderr();
  const auto offloaded = on_two_ranks([&](auto comm) {
    return plugin_run(comm, AcceleratorOptions().deepspeed_plugin(
                                DeepSpeedPlugin().zero_stage(2).offload_optimizer_device(
                                    accelerate::OffloadDevice::kCpu)));
  });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr("offload_optimizer_device cpu changes nothing in a CPU-only job"));
  const auto plain = on_two_ranks([&](auto comm) {
    return plugin_run(comm, AcceleratorOptions().deepspeed_plugin(DeepSpeedPlugin().zero_stage(2)));
  });
  expect_equal_runs(offloaded, plain);
}

}  // namespace
