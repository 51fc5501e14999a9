// Where the Accelerator's ZeRO setting comes from and what its fields do:
// the variables `accelerate launch` sets (DeepSpeed or FSDP, whose wrap
// policy gives stage 3's units), a DeepSpeed JSON file, gradient_clipping at
// every step, gradient_accumulation_steps, offloading on a CPU job, and the
// one-line refusals. Ranks are threads with real collectives.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/common/errors.h"
#include "accelerate/sharding/fsdp_plugin.h"
#include "sharding/plugin_from_environment.h"
#include "sharding/unit_policy.h"
#include "sharding/zero_test_model.h"
#include "sharding/zero_test_support.h"
#include "support/thread_ranks.h"

namespace {

using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::DeepSpeedPlugin;
using accelerate::Environment;
using accelerate::FsdpAutoWrapPolicy;
using accelerate::FsdpShardingStrategy;
using accelerate::FullyShardedDataParallelPlugin;
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
  run.distributed_type = to_string(accelerator.distributed_type());
  for (const auto& p : model->parameters()) {
    run.parameters.push_back(p.detach().clone());
    run.total_elements += p.numel();
  }
  run.state_elements = accelerate::testing::optimizer_state_elements(optimizer);
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

TEST(ZeroPlugin, FsdpShardGradOpIsStageTwo) {
  const Environment env = {{"ACCELERATE_USE_FSDP", "true"},
                           {"FSDP_SHARDING_STRATEGY", "SHARD_GRAD_OP"}};
  const auto runs = on_two_ranks(
      [&](auto comm) { return plugin_run(comm, AcceleratorOptions().environment(env)); });
  for (const auto& run : runs) {
    EXPECT_EQ(run.distributed_type, "FSDP");
    EXPECT_LT(run.state_elements, run.total_elements);
  }
}

// The unit paths the FSDP plugin `env` describes find in ZeroNet.
std::vector<std::string> units_for(const Environment& env) {
  const auto plugin = accelerate::sharding::fsdp_plugin_from_environment(env);
  if (!plugin) ADD_FAILURE() << "no FSDP plugin";
  ZeroNet model;
  std::vector<std::string> paths;
  const auto policy =
      accelerate::sharding::unit_policy_of(plugin.value_or(FullyShardedDataParallelPlugin()));
  for (const auto& unit : accelerate::sharding::find_units(*model, policy)) {
    paths.push_back(unit.path);
  }
  return paths;
}

// ZeroNet: first 120 parameter elements, second and spare 600 each, last 25.
TEST(ZeroPlugin, FsdpVariablesGiveTheWrapPolicysUnits) {
  using ::testing::ElementsAre;
  const Environment fsdp = {{"ACCELERATE_USE_FSDP", "true"}};
  auto with = [&](Environment more) {
    more.insert(fsdp.begin(), fsdp.end());
    return more;
  };
  EXPECT_THAT(units_for(with({{"FSDP_AUTO_WRAP_POLICY", "transformer_based_wrap"},
                              {"FSDP_TRANSFORMER_CLS_TO_WRAP", "Linear"}})),
              ElementsAre("first", "second", "spare", "last"));
  EXPECT_THAT(units_for(with(
                  {{"FSDP_AUTO_WRAP_POLICY", "SIZE_BASED_WRAP"}, {"FSDP_MIN_NUM_PARAMS", "500"}})),
              ElementsAre("second", "spare"));
  // Accelerate's launcher passes 1e8 when nothing sets it: no module is that large.
  EXPECT_THAT(units_for(with({{"FSDP_AUTO_WRAP_POLICY", "SIZE_BASED_WRAP"}})), ElementsAre());
  // Without a policy (Accelerate's NO_WRAP), no units; the class names are not read.
  EXPECT_THAT(units_for(with({{"FSDP_TRANSFORMER_CLS_TO_WRAP", "Linear"}})), ElementsAre());
  const auto plugin = accelerate::sharding::fsdp_plugin_from_environment(
      with({{"FSDP_AUTO_WRAP_POLICY", "TRANSFORMER_BASED_WRAP"},
            {"FSDP_TRANSFORMER_CLS_TO_WRAP", " Block , ,Mlp"},
            {"FSDP_BACKWARD_PREFETCH", "BACKWARD_PRE"},
            {"FSDP_OFFLOAD_PARAMS", "true"}}));
  ASSERT_TRUE(plugin.has_value());
  EXPECT_THAT(plugin->transformer_cls_names_to_wrap(), ElementsAre("Block", "Mlp"));
  EXPECT_EQ(plugin->backward_prefetch(), accelerate::FsdpBackwardPrefetch::kBackwardPre);
  EXPECT_TRUE(plugin->cpu_offload());
  EXPECT_EQ(plugin->state_dict_type(), accelerate::FsdpStateDictType::kFullStateDict);
  EXPECT_FALSE(accelerate::sharding::fsdp_plugin_from_environment({}).has_value());
  // FULL_SHARD is stage 3, unless FSDP 2 keeps the parameters after forward.
  const auto stage = [&](Environment more) {
    return accelerate::sharding::zero_plugin_of(
               *accelerate::sharding::fsdp_plugin_from_environment(with(std::move(more))))
        .zero_stage();
  };
  EXPECT_EQ(stage({}), 3);
  EXPECT_EQ(stage({{"FSDP_VERSION", "2"}, {"FSDP_RESHARD_AFTER_FORWARD", "false"}}), 2);
  EXPECT_EQ(stage({{"FSDP_VERSION", "2"}, {"FSDP_RESHARD_AFTER_FORWARD", "true"}}), 3);
  EXPECT_EQ(stage({{"FSDP_SHARDING_STRATEGY", "NO_SHARD"}}), 0);
  EXPECT_EQ(accelerate::sharding::zero_plugin_of(
                FullyShardedDataParallelPlugin().reshard_after_forward(false))
                .zero_stage(),
            2);
}

// The ConfigError an Accelerator with `options` throws on one rank.
std::string accelerator_refusal(const AcceleratorOptions& options) {
  std::string message = "(no error)";
  accelerate::testing::run_rank_communicators(1, [&](std::shared_ptr<Communicator> comm) {
    try {
      Accelerator accelerator(comm, options);
    } catch (const accelerate::ConfigError& error) {
      message = error.what();
    }
  });
  return message;
}

TEST(ZeroPlugin, FsdpRefusalsAreOneLine) {
  const std::string no_classes =
      "FSDP auto wrap policy TRANSFORMER_BASED_WRAP needs the class names of the model's blocks: "
      "set fsdp_transformer_layer_cls_to_wrap (e.g. Block), or use SIZE_BASED_WRAP or NO_WRAP";
  EXPECT_EQ(
      accelerator_refusal(AcceleratorOptions().environment(Environment{
          {"ACCELERATE_USE_FSDP", "true"}, {"FSDP_AUTO_WRAP_POLICY", "TRANSFORMER_BASED_WRAP"}})),
      "FSDP_AUTO_WRAP_POLICY: " + no_classes);  // the variable that decided
  EXPECT_EQ(accelerator_refusal(AcceleratorOptions().fsdp_plugin(
                FullyShardedDataParallelPlugin()
                    .auto_wrap_policy(FsdpAutoWrapPolicy::kTransformerBasedWrap)
                    .transformer_cls_names_to_wrap({" "}))),
            no_classes);
  // Below stage 3 there are no units, so no class is needed.
  EXPECT_EQ(accelerator_refusal(AcceleratorOptions().fsdp_plugin(
                FullyShardedDataParallelPlugin()
                    .sharding_strategy(FsdpShardingStrategy::kShardGradOp)
                    .auto_wrap_policy(FsdpAutoWrapPolicy::kTransformerBasedWrap))),
            "(no error)");
  // The hybrid strategies run (tests/sharding/hybrid_shard_test.cpp).
  EXPECT_EQ(accelerator_refusal(AcceleratorOptions().environment(Environment{
                {"ACCELERATE_USE_FSDP", "true"}, {"FSDP_SHARDING_STRATEGY", "HYBRID_SHARD"}})),
            "(no error)");
  EXPECT_EQ(accelerator_refusal(
                AcceleratorOptions().fsdp_plugin(FullyShardedDataParallelPlugin().sharding_strategy(
                    FsdpShardingStrategy::kHybridShardZero2))),
            "(no error)");
  EXPECT_EQ(accelerator_refusal(AcceleratorOptions()
                                    .deepspeed_plugin(DeepSpeedPlugin())
                                    .fsdp_plugin(FullyShardedDataParallelPlugin())),
            "AcceleratorOptions sets both deepspeed_plugin and fsdp_plugin; choose one (they "
            "select the same ZeRO engine)");
  EXPECT_EQ(accelerator_refusal(
                AcceleratorOptions().fsdp_plugin(FullyShardedDataParallelPlugin().fsdp_version(3))),
            "fsdp_version expects 1 or 2, got '3'");
  EXPECT_EQ(accelerator_refusal(AcceleratorOptions().environment(Environment{
                {"ACCELERATE_USE_FSDP", "true"}, {"FSDP_AUTO_WRAP_POLICY", "BLOCK_WRAP"}})),
            "FSDP_AUTO_WRAP_POLICY expects TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP, "
            "got 'BLOCK_WRAP'");
}

// FSDP_CPU_RAM_EFFICIENT_LOADING and FSDP_SYNC_MODULE_STATES reach the
// plugin (defaults false and true), and Accelerate's rule, no efficient
// loading without syncing module states, is one line naming both, whether
// the plugin comes from the variables or from code.
TEST(ZeroPlugin, FsdpCpuRamEfficientLoadingAndSyncModuleStates) {
  using accelerate::sharding::fsdp_plugin_from_environment;
  const auto read = [](Environment more) {
    more.emplace("ACCELERATE_USE_FSDP", "true");
    return fsdp_plugin_from_environment(more);
  };
  const auto defaults = read({});
  ASSERT_TRUE(defaults.has_value());
  EXPECT_FALSE(defaults->cpu_ram_efficient_loading());
  EXPECT_TRUE(defaults->sync_module_states());
  EXPECT_FALSE(FullyShardedDataParallelPlugin().cpu_ram_efficient_loading());
  EXPECT_TRUE(FullyShardedDataParallelPlugin().sync_module_states());
  const auto on =
      read({{"FSDP_CPU_RAM_EFFICIENT_LOADING", "true"}, {"FSDP_SYNC_MODULE_STATES", "true"}});
  ASSERT_TRUE(on.has_value());
  EXPECT_TRUE(on->cpu_ram_efficient_loading());
  EXPECT_TRUE(on->sync_module_states());
  EXPECT_EQ(accelerate::sharding::zero_plugin_of(*on).zero_stage(), 3);
  const auto off =
      read({{"FSDP_CPU_RAM_EFFICIENT_LOADING", "False"}, {"FSDP_SYNC_MODULE_STATES", "0"}});
  ASSERT_TRUE(off.has_value());
  EXPECT_FALSE(off->cpu_ram_efficient_loading());
  EXPECT_FALSE(off->sync_module_states());
  // Efficient loading alone keeps the default sync (true): accepted.
  EXPECT_TRUE(read({{"FSDP_CPU_RAM_EFFICIENT_LOADING", "1"}})->sync_module_states());

  const std::string forbidden =
      "FSDP cpu_ram_efficient_loading is true but sync_module_states is false; Accelerate "
      "requires sync_module_states to be true when cpu_ram_efficient_loading is true (every "
      "process but the main one would keep empty weights): set fsdp_sync_module_states to true, "
      "or fsdp_cpu_ram_efficient_loading to false";
  const auto error_of = [](auto&& build) {
    try {
      build();
    } catch (const accelerate::ConfigError& error) {
      return std::string(error.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error_of([&] {
              read({{"FSDP_CPU_RAM_EFFICIENT_LOADING", "true"},
                    {"FSDP_SYNC_MODULE_STATES", "false"},
                    {"FSDP_SHARDING_STRATEGY", "SHARD_GRAD_OP"}});
            }),
            "FSDP_CPU_RAM_EFFICIENT_LOADING, FSDP_SYNC_MODULE_STATES: " + forbidden);
  EXPECT_EQ(
      error_of([&] {
        accelerate::sharding::zero_plugin_of(
            FullyShardedDataParallelPlugin().cpu_ram_efficient_loading(true).sync_module_states(
                false));
      }),
      forbidden);
  EXPECT_EQ(accelerator_refusal(AcceleratorOptions().environment(
                Environment{{"ACCELERATE_USE_FSDP", "true"},
                            {"FSDP_CPU_RAM_EFFICIENT_LOADING", "true"},
                            {"FSDP_SYNC_MODULE_STATES", "false"}})),
            "FSDP_CPU_RAM_EFFICIENT_LOADING, FSDP_SYNC_MODULE_STATES: " + forbidden);
  EXPECT_EQ(accelerator_refusal(AcceleratorOptions().fsdp_plugin(
                FullyShardedDataParallelPlugin().cpu_ram_efficient_loading(true).sync_module_states(
                    false))),
            forbidden);
  EXPECT_EQ(accelerator_refusal(AcceleratorOptions().environment(Environment{
                {"ACCELERATE_USE_FSDP", "true"}, {"FSDP_SYNC_MODULE_STATES", "maybe"}})),
            "FSDP_SYNC_MODULE_STATES expects true or false (or 1/0, yes/no), got 'maybe'");
  EXPECT_EQ(accelerator_refusal(AcceleratorOptions().environment(Environment{
                {"ACCELERATE_USE_FSDP", "true"}, {"FSDP_CPU_RAM_EFFICIENT_LOADING", "maybe"}})),
            "FSDP_CPU_RAM_EFFICIENT_LOADING expects true or false (or 1/0, yes/no), got 'maybe'");
}

// Accelerate's default FSDP settings (FULL_SHARD, NO_WRAP) from the launcher
// run as the same plugin given in code, and as data parallelism: without
// units every parameter is sharded as at stage 2. FSDP does not clip.
TEST(ZeroPlugin, FsdpFullShardFromTheEnvironmentIsThePluginsStageThree) {
  const auto from_env = on_two_ranks([&](auto comm) {
    return plugin_run(
        comm, AcceleratorOptions().environment(Environment{{"ACCELERATE_USE_FSDP", "true"}}));
  });
  const auto from_code = on_two_ranks([&](auto comm) {
    return plugin_run(comm, AcceleratorOptions().fsdp_plugin(FullyShardedDataParallelPlugin()));
  });
  const auto data_parallel =
      on_two_ranks([&](auto comm) { return plugin_run(comm, AcceleratorOptions()); });
  for (const auto& run : from_code) {
    EXPECT_EQ(run.distributed_type, "FSDP");
    EXPECT_LT(run.state_elements, run.total_elements);
  }
  expect_equal_runs(from_env, from_code);
  expect_equal_runs(from_code, data_parallel);
}

TEST(ZeroPlugin, FsdpOffloadAndPrefetchOnACpuJobAreAcceptedAndSaySo) {
  ::testing::internal::CaptureStderr();
  const auto tuned = on_two_ranks([&](auto comm) {
    return plugin_run(comm,
                      AcceleratorOptions().fsdp_plugin(
                          FullyShardedDataParallelPlugin()
                              .cpu_offload(true)
                              .backward_prefetch(accelerate::FsdpBackwardPrefetch::kBackwardPre)
                              .forward_prefetch(true)
                              .state_dict_type(accelerate::FsdpStateDictType::kShardedStateDict)));
  });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err,
              HasSubstr("accelerate: note: FSDP cpu_offload changes nothing in a CPU-only "
                        "job: the parameters and the optimizer state are in CPU memory already\n"));
  // Gathers are always prefetched: asking for it changes nothing and says nothing.
  EXPECT_THAT(err, ::testing::Not(HasSubstr("prefetch")));
  const auto plain = on_two_ranks([&](auto comm) {
    return plugin_run(comm, AcceleratorOptions().fsdp_plugin(FullyShardedDataParallelPlugin()));
  });
  expect_equal_runs(tuned, plain);
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
