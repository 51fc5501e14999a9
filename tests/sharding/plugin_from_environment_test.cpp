// The DeepSpeedPlugin a launched program gets from its environment
// (src/sharding/plugin_from_environment.h): Accelerate's DeepSpeedPlugin
// defaults and variables, a DeepSpeed config file filling the plugin, FSDP's
// sharding strategies mapped onto ZeRO stages, and each refusal's message.
#include <gtest/gtest.h>

#include <string>

#include "accelerate/common/errors.h"
#include "sharding/plugin_from_environment.h"

namespace accelerate::sharding {
namespace {

std::string template_file(const std::string& name) {
  return std::string(ACCELERATE_SOURCE_DIR) + "/tests/sharding/fixtures/" + name;
}

// The plugin for `env`; ADD_FAILURE when there is none.
DeepSpeedPlugin plugin_for(const Environment& env, std::string* type = nullptr) {
  auto plugin = deepspeed_plugin_from_environment(env, type);
  if (!plugin) ADD_FAILURE() << "no plugin";
  return plugin.value_or(DeepSpeedPlugin());
}

std::string refusal_for(const Environment& env) {
  try {
    deepspeed_plugin_from_environment(env, nullptr);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(PluginFromEnvironment, NothingWithoutDeepSpeedOrFsdp) {
  std::string type = "unchanged";
  EXPECT_FALSE(deepspeed_plugin_from_environment({}, &type).has_value());
  EXPECT_FALSE(
      deepspeed_plugin_from_environment(
          {{"ACCELERATE_USE_DEEPSPEED", "false"}, {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "1"}}, &type)
          .has_value());
  EXPECT_EQ(type, "unchanged");
  // Without DeepSpeed its variables are not read, as in Accelerate.
  EXPECT_FALSE(
      deepspeed_plugin_from_environment({{"ACCELERATE_DEEPSPEED_ZERO_STAGE", "9"}}, nullptr)
          .has_value());
}

TEST(PluginFromEnvironment, DeepSpeedDefaultsAreAccelerates) {
  std::string type;
  const DeepSpeedPlugin plugin = plugin_for({{"ACCELERATE_USE_DEEPSPEED", "true"}}, &type);
  EXPECT_EQ(type, "DEEPSPEED");
  EXPECT_EQ(plugin.zero_stage(), 2);
  EXPECT_FALSE(plugin.gradient_accumulation_steps().has_value());  // the Accelerator's
  // Accelerate's DeepSpeedPlugin reads a missing ACCELERATE_GRADIENT_CLIPPING
  // as "auto", which prepare() fills with 1.0.
  EXPECT_EQ(plugin.gradient_clipping(), 1.0);
  EXPECT_EQ(plugin.offload_optimizer_device(), OffloadDevice::kNone);
  EXPECT_EQ(plugin.offload_param_device(), OffloadDevice::kNone);
  EXPECT_FALSE(plugin.zero3_init_flag());
  EXPECT_FALSE(plugin.zero3_save_16bit_model());
  EXPECT_FALSE(plugin.hf_ds_config().has_value());
}

TEST(PluginFromEnvironment, EveryDeepSpeedVariable) {
  const DeepSpeedPlugin plugin =
      plugin_for({{"ACCELERATE_USE_DEEPSPEED", "true"},
                  {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "1"},
                  {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4"},
                  {"ACCELERATE_GRADIENT_CLIPPING", "1.0"},
                  {"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "cpu"},
                  {"ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "none"},
                  {"ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "true"},
                  {"ACCELERATE_DEEPSPEED_CONFIG_FILE", "none"}});
  EXPECT_EQ(plugin.zero_stage(), 1);
  EXPECT_EQ(plugin.gradient_accumulation_steps(), 4);
  EXPECT_EQ(plugin.gradient_clipping(), 1.0);
  EXPECT_EQ(plugin.offload_optimizer_device(), OffloadDevice::kCpu);
  EXPECT_EQ(plugin.offload_param_device(), OffloadDevice::kNone);
  EXPECT_TRUE(plugin.zero3_save_16bit_model());
  EXPECT_FALSE(plugin.hf_ds_config().has_value());  // "none" is Accelerate's "no file"
}

TEST(PluginFromEnvironment, Zero3InitIsOnAtStage3AndOffBelowIt) {
  const Environment stage3 = {{"ACCELERATE_USE_DEEPSPEED", "true"},
                              {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "3"}};
  EXPECT_TRUE(plugin_for(stage3).zero3_init_flag());
  Environment off = stage3;
  off["ACCELERATE_DEEPSPEED_ZERO3_INIT"] = "false";
  EXPECT_FALSE(plugin_for(off).zero3_init_flag());
  // Accelerate warns and switches it off below stage 3.
  EXPECT_FALSE(plugin_for({{"ACCELERATE_USE_DEEPSPEED", "true"},
                           {"ACCELERATE_DEEPSPEED_ZERO3_INIT", "true"}})
                   .zero3_init_flag());
}

TEST(PluginFromEnvironment, AConfigFileWinsAndItsAutoKeepsTheVariables) {
  const std::string path = template_file("zero_stage2_offload_config.json");
  const DeepSpeedPlugin plugin = plugin_for({{"ACCELERATE_USE_DEEPSPEED", "true"},
                                             {"ACCELERATE_DEEPSPEED_CONFIG_FILE", path},
                                             {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "1"},
                                             {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4"},
                                             {"ACCELERATE_GRADIENT_CLIPPING", "0.5"}});
  EXPECT_EQ(plugin.hf_ds_config(), path);
  EXPECT_EQ(plugin.zero_stage(), 2);                   // "stage": 2
  EXPECT_EQ(plugin.gradient_accumulation_steps(), 1);  // "gradient_accumulation_steps": 1
  EXPECT_EQ(plugin.gradient_clipping(), 0.5);          // "gradient_clipping": "auto"
  EXPECT_EQ(plugin.offload_optimizer_device(), OffloadDevice::kCpu);
  EXPECT_EQ(plugin.offload_param_device(), OffloadDevice::kNone);  // no offload_param section
}

TEST(PluginFromEnvironment, KeysAFileLeavesOutTakeDeepSpeedsDefaults) {
  DeepSpeedPlugin plugin;
  plugin.zero_stage(2).gradient_clipping(1.0).offload_param_device(OffloadDevice::kCpu);
  fill_from_config_file(
      parse_deepspeed_config(R"({"zero_optimization": {}, "train_batch_size": 8})", "f.json"),
      plugin);
  EXPECT_EQ(plugin.zero_stage(), 0);
  EXPECT_EQ(plugin.gradient_accumulation_steps(), 1);
  EXPECT_FALSE(plugin.gradient_clipping().has_value());
  EXPECT_EQ(plugin.offload_param_device(), OffloadDevice::kNone);
  DeepSpeedPlugin autos;
  autos.zero_stage(1).gradient_accumulation_steps(3);
  fill_from_config_file(
      parse_deepspeed_config(R"({"zero_optimization": {"stage": "auto"}, "train_batch_size": 8,
                                                   "gradient_accumulation_steps": "auto"})",
                             "f.json"),
      autos);
  EXPECT_EQ(autos.zero_stage(), 1);
  EXPECT_EQ(autos.gradient_accumulation_steps(), 3);
}

TEST(PluginFromEnvironment, AFileThatCannotBeUsedIsOneLine) {
  EXPECT_EQ(refusal_for({{"ACCELERATE_USE_DEEPSPEED", "true"},
                         {"ACCELERATE_DEEPSPEED_CONFIG_FILE", "/no/ds.json"}}),
            "/no/ds.json: cannot read the DeepSpeed config file: No such file or directory");
}

TEST(PluginFromEnvironment, BadValuesNameTheVariable) {
  EXPECT_EQ(refusal_for({{"ACCELERATE_USE_DEEPSPEED", "true"},
                         {"ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "nvme"}}),
            "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE expects none or cpu (nvme offloading is not "
            "supported by "
            "accelerate-cpp), got 'nvme'");
  EXPECT_EQ(refusal_for({{"ACCELERATE_USE_DEEPSPEED", "yes please"}}),
            "ACCELERATE_USE_DEEPSPEED expects true or false (or 1/0, yes/no), got 'yes please'");
  EXPECT_EQ(refusal_for({{"ACCELERATE_USE_DEEPSPEED", "1"}, {"ACCELERATE_USE_FSDP", "1"}}),
            "ACCELERATE_USE_DEEPSPEED and ACCELERATE_USE_FSDP are both true; choose one (they "
            "select the same ZeRO "
            "engine)");
}

TEST(PluginFromEnvironment, FsdpStrategiesAreZeroStages) {
  std::string type;
  EXPECT_EQ(
      plugin_for({{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_SHARDING_STRATEGY", "SHARD_GRAD_OP"}},
                 &type)
          .zero_stage(),
      2);
  EXPECT_EQ(type, "FSDP");
  // FSDP, unlike DeepSpeed, clips only when the program asks.
  EXPECT_FALSE(
      plugin_for({{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_SHARDING_STRATEGY", "SHARD_GRAD_OP"}})
          .gradient_clipping()
          .has_value());
  EXPECT_EQ(
      plugin_for({{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_SHARDING_STRATEGY", "3"}}).zero_stage(),
      0);
  // The strategy wins over FSDP_RESHARD_AFTER_FORWARD.
  EXPECT_EQ(plugin_for({{"ACCELERATE_USE_FSDP", "true"},
                        {"FSDP_SHARDING_STRATEGY", "NO_SHARD"},
                        {"FSDP_RESHARD_AFTER_FORWARD", "FULL_SHARD"}})
                .zero_stage(),
            0);
  // What Accelerate 1.6 and later write: the strategy in reshard_after_forward.
  EXPECT_EQ(
      plugin_for({{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_RESHARD_AFTER_FORWARD", "SHARD_GRAD_OP"}})
          .zero_stage(),
      2);
  EXPECT_EQ(plugin_for({{"ACCELERATE_USE_FSDP", "true"},
                        {"FSDP_VERSION", "2"},
                        {"FSDP_RESHARD_AFTER_FORWARD", "false"}})
                .zero_stage(),
            2);
}

TEST(PluginFromEnvironment, FullShardIsStage3AndHybridStrategiesAreStages3And2) {
  EXPECT_EQ(plugin_for({{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_SHARDING_STRATEGY", "FULL_SHARD"}})
                .zero_stage(),
            3);
  EXPECT_EQ(plugin_for({{"ACCELERATE_USE_FSDP", "true"}}).zero_stage(), 3);  // Accelerate's default
  EXPECT_EQ(plugin_for({{"ACCELERATE_USE_FSDP", "true"},
                        {"FSDP_VERSION", "2"},
                        {"FSDP_RESHARD_AFTER_FORWARD", "true"}})
                .zero_stage(),
            3);
  // Sharded within each machine, replicated across machines (the engine's groups).
  EXPECT_EQ(
      plugin_for({{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_SHARDING_STRATEGY", "HYBRID_SHARD"}})
          .zero_stage(),
      3);
  EXPECT_EQ(
      plugin_for({{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_SHARDING_STRATEGY", "5"}}).zero_stage(),
      2);
}

TEST(PluginFromEnvironment, ReshardAfterForwardMustFitTheFsdpVersion) {
  EXPECT_EQ(refusal_for({{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_RESHARD_AFTER_FORWARD", "false"}}),
            "FSDP_RESHARD_AFTER_FORWARD is 'false', which FSDP version 1 does not take: write a "
            "sharding strategy "
            "(SHARD_GRAD_OP), or use FSDP version 2");
  EXPECT_EQ(refusal_for({{"ACCELERATE_USE_FSDP", "true"},
                         {"FSDP_VERSION", "2"},
                         {"FSDP_RESHARD_AFTER_FORWARD", "SHARD_GRAD_OP"}}),
            "FSDP_RESHARD_AFTER_FORWARD is 'SHARD_GRAD_OP', which FSDP version 2 does not take: "
            "write false "
            "(SHARD_GRAD_OP) or true (FULL_SHARD), or use FSDP version 1");
  EXPECT_EQ(refusal_for({{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_VERSION", "3"}}),
            "FSDP_VERSION expects 1 or 2, got '3'");
}

// FSDP_CPU_RAM_EFFICIENT_LOADING (default false) and FSDP_SYNC_MODULE_STATES
// (default true) reach the FSDP plugin; Accelerate refuses efficient loading
// without syncing module states, here in one line naming both.
TEST(PluginFromEnvironment, CpuRamEfficientLoadingNeedsSyncModuleStates) {
  const auto fsdp = [](Environment env) {
    env.emplace("ACCELERATE_USE_FSDP", "true");
    auto plugin = fsdp_plugin_from_environment(env);
    if (!plugin) ADD_FAILURE() << "no FSDP plugin";
    return plugin.value_or(FullyShardedDataParallelPlugin());
  };
  EXPECT_FALSE(fsdp({}).cpu_ram_efficient_loading());
  EXPECT_TRUE(fsdp({}).sync_module_states());
  const auto on =
      fsdp({{"FSDP_CPU_RAM_EFFICIENT_LOADING", "true"}, {"FSDP_SYNC_MODULE_STATES", "true"}});
  EXPECT_TRUE(on.cpu_ram_efficient_loading());
  EXPECT_TRUE(on.sync_module_states());
  const auto off =
      fsdp({{"FSDP_CPU_RAM_EFFICIENT_LOADING", "false"}, {"FSDP_SYNC_MODULE_STATES", "false"}});
  EXPECT_FALSE(off.cpu_ram_efficient_loading());
  EXPECT_FALSE(off.sync_module_states());
  EXPECT_TRUE(fsdp({{"FSDP_CPU_RAM_EFFICIENT_LOADING", "true"}}).sync_module_states());
  EXPECT_EQ(
      plugin_for({{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_CPU_RAM_EFFICIENT_LOADING", "true"}})
          .zero_stage(),
      3);
  const std::string forbidden =
      "FSDP cpu_ram_efficient_loading is true but sync_module_states is false; Accelerate "
      "requires sync_module_states to be true when cpu_ram_efficient_loading is true (every "
      "process but the main one would keep empty weights): set fsdp_sync_module_states to true, "
      "or fsdp_cpu_ram_efficient_loading to false";
  EXPECT_EQ(refusal_for({{"ACCELERATE_USE_FSDP", "true"},
                         {"FSDP_CPU_RAM_EFFICIENT_LOADING", "true"},
                         {"FSDP_SYNC_MODULE_STATES", "false"}}),
            "FSDP_CPU_RAM_EFFICIENT_LOADING, FSDP_SYNC_MODULE_STATES: " + forbidden);
  try {
    fsdp_plugin_from_environment({{"ACCELERATE_USE_FSDP", "true"},
                                  {"FSDP_CPU_RAM_EFFICIENT_LOADING", "1"},
                                  {"FSDP_SYNC_MODULE_STATES", "no"}});
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& error) {
    EXPECT_EQ(error.what(),
              "FSDP_CPU_RAM_EFFICIENT_LOADING, FSDP_SYNC_MODULE_STATES: " + forbidden);
  }
  try {
    zero_plugin_of(
        FullyShardedDataParallelPlugin().cpu_ram_efficient_loading(true).sync_module_states(false));
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& error) {
    EXPECT_EQ(error.what(), forbidden);
  }
  EXPECT_EQ(
      refusal_for({{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_CPU_RAM_EFFICIENT_LOADING", "maybe"}}),
      "FSDP_CPU_RAM_EFFICIENT_LOADING expects true or false (or 1/0, yes/no), got 'maybe'");
  EXPECT_EQ(refusal_for({{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_SYNC_MODULE_STATES", "maybe"}}),
            "FSDP_SYNC_MODULE_STATES expects true or false (or 1/0, yes/no), got 'maybe'");
}

}  // namespace
}  // namespace accelerate::sharding
