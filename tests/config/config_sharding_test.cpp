// deepspeed_config and fsdp_config (ZeRO through Accelerate's config files):
// files as Accelerate writes them select ZeRO for the ranks, the keys reach
// the ranks' environment and the plugin they build from it, flags win, and
// every value or combination we cannot run is one line naming file, line
// and key.
#include <gtest/gtest.h>

#include <algorithm>

#include "config/config_file.h"
#include "launcher/child_environment.h"
#include "launcher/config_application.h"
#include "launcher/launch_errors.h"
#include "launcher/launch_options.h"
#include "launcher/sharding_check.h"
#include "sharding/plugin_from_environment.h"

namespace accelerate::config {
namespace {

using launcher::LaunchOptions;
using launcher::OptionSource;

struct ShardedApply {
  LaunchOptions options;
  std::vector<std::string> notes;
  Environment rank_env;  // what rank 0 would get (from these options alone)
};

ShardedApply apply_sharded(const ConfigFile& file, LaunchOptions options = {}) {
  ShardedApply result{std::move(options), {}, {}};
  result.notes = launcher::apply_config_file(file, result.options);
  result.rank_env = launcher::build_child_environment(result.options, 0, {}, 1);
  return result;
}

ShardedApply apply_sharded_fixture(const std::string& name, LaunchOptions options = {}) {
  return apply_sharded(load_config_file(std::string(CONFIG_FIXTURES_DIR) + "/" + name),
                       std::move(options));
}

// The UsageError (or ConfigFileError) that loading and applying `text` throws.
std::string sharded_error(const std::string& text, LaunchOptions options = {}) {
  try {
    apply_sharded(parse_config_text(text, "f.yaml"), std::move(options));
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "(no error)";
}

LaunchOptions with_flag(LaunchOptions options, const std::string& name) {
  options.sources[name] = OptionSource::kFlag;
  return options;
}

std::string value_of(const Environment& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? "(unset)" : it->second;
}

TEST(ConfigDeepSpeed, AccelerateZero2FileSelectsZeroStage2) {
  ShardedApply a = apply_sharded_fixture("hf_deepspeed_zero2.yaml");
  EXPECT_TRUE(a.options.use_deepspeed);
  EXPECT_FALSE(a.options.multi_gpu);  // DEEPSPEED runs on GPUs when there are any, else on the CPU
  EXPECT_EQ(a.options.source_of("use_deepspeed"), OptionSource::kConfigFile);
  EXPECT_EQ(a.options.zero_stage, 2);
  EXPECT_EQ(a.options.source_of("zero_stage"), OptionSource::kConfigFile);
  EXPECT_EQ(a.options.gradient_accumulation_steps, 1);
  EXPECT_EQ(a.options.offload_optimizer_device, OffloadDevice::kNone);
  EXPECT_EQ(a.options.zero3_init_flag, false);
  EXPECT_EQ(a.options.num_processes, 2);
  EXPECT_TRUE(a.notes.empty()) << a.notes.front();
  EXPECT_EQ(value_of(a.rank_env, "ACCELERATE_USE_DEEPSPEED"), "true");
  EXPECT_EQ(value_of(a.rank_env, "ACCELERATE_DEEPSPEED_ZERO_STAGE"), "2");
  EXPECT_EQ(value_of(a.rank_env, "ACCELERATE_GRADIENT_ACCUMULATION_STEPS"), "1");
  EXPECT_EQ(value_of(a.rank_env, "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE"), "none");
  EXPECT_EQ(value_of(a.rank_env, "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE"), "none");
  EXPECT_EQ(value_of(a.rank_env, "ACCELERATE_DEEPSPEED_ZERO3_INIT"), "false");
  EXPECT_EQ(value_of(a.rank_env, "ACCELERATE_MIXED_PRECISION"), "bf16");
  EXPECT_EQ(value_of(a.rank_env, "ACCELERATE_USE_FSDP"), "(unset)");
  std::string type;
  auto plugin = sharding::deepspeed_plugin_from_environment(a.rank_env, &type);
  ASSERT_TRUE(plugin.has_value());
  EXPECT_EQ(type, "DEEPSPEED");
  EXPECT_EQ(plugin->zero_stage(), 2);
  EXPECT_EQ(plugin->gradient_accumulation_steps(), 1);
}

TEST(ConfigDeepSpeed, AConfigFileReachesTheRanksByItsPath) {
  ShardedApply a = apply_sharded_fixture("hf_deepspeed_config_file.yaml");
  EXPECT_TRUE(a.options.use_deepspeed);
  EXPECT_EQ(a.options.deepspeed_config_file, "tests/sharding/fixtures/zero_stage2_config.json");
  EXPECT_FALSE(a.options.mixed_precision.has_value());  // the JSON's fp16 section decides
  EXPECT_EQ(value_of(a.rank_env, "ACCELERATE_DEEPSPEED_CONFIG_FILE"),
            "tests/sharding/fixtures/zero_stage2_config.json");
  EXPECT_EQ(value_of(a.rank_env, "ACCELERATE_DEEPSPEED_ZERO_STAGE"), "(unset)");
  EXPECT_TRUE(a.notes.empty()) << a.notes.front();
}

TEST(ConfigDeepSpeed, KeysBesideTheConfigFileAreRefusedAsInAccelerate) {
  const std::string text =
      "distributed_type: DEEPSPEED\n"
      "deepspeed_config:\n"
      "  deepspeed_config_file: ds.json\n"
      "  gradient_clipping: 1.0\n"
      "  zero_stage: 2\n"
      "  zero3_init_flag: true\n"
      "mixed_precision: fp16\n";
  EXPECT_EQ(sharded_error(text),
            "f.yaml: gradient_clipping, zero_stage and mixed_precision are set together with "
            "deepspeed_config_file "
            "(ds.json), which replaces them: remove them from the accelerate config and set them "
            "in ds.json");
  // A --mixed_precision flag overrides the file's, which is then allowed.
  LaunchOptions flagged;
  flagged.mixed_precision = MixedPrecision::kBF16;
  EXPECT_EQ(sharded_error(text, with_flag(flagged, "mixed_precision")),
            "f.yaml: gradient_clipping and zero_stage are set together with deepspeed_config_file "
            "(ds.json), which "
            "replaces them: remove them from the accelerate config and set them in ds.json");
  // The same keys given to a file named by the flag.
  LaunchOptions file_flag;
  file_flag.deepspeed_config_file = "other.json";
  EXPECT_NE(sharded_error("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 1\n",
                          with_flag(file_flag, "deepspeed_config_file"))
                .find("f.yaml: zero_stage is set together with deepspeed_config_file (other.json)"),
            std::string::npos);
}

TEST(ConfigDeepSpeed, FlagsWinOverTheSection) {
  LaunchOptions options;
  options.zero_stage = 1;
  options.gradient_clipping = 0.5;
  options.sources["gradient_clipping"] = OptionSource::kFlag;
  ShardedApply a =
      apply_sharded(parse_config_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n  "
                                      "zero_stage: 2\n  gradient_clipping: 1.0\n",
                                      "f.yaml"),
                    with_flag(options, "zero_stage"));
  EXPECT_EQ(a.options.zero_stage, 1);
  EXPECT_EQ(a.options.source_of("zero_stage"), OptionSource::kFlag);
  EXPECT_EQ(value_of(a.rank_env, "ACCELERATE_DEEPSPEED_ZERO_STAGE"), "1");
  EXPECT_EQ(value_of(a.rank_env, "ACCELERATE_GRADIENT_CLIPPING"), "0.5");
}

TEST(ConfigDeepSpeed, AccumulationStepsGivenTwiceMustAgree) {
  const std::string text =
      "distributed_type: DEEPSPEED\ndeepspeed_config:\n  gradient_accumulation_steps: 4\n";
  LaunchOptions two;
  two.gradient_accumulation_steps = 2;
  EXPECT_EQ(sharded_error(text, with_flag(two, "gradient_accumulation_steps")),
            "f.yaml:3: key 'deepspeed_config.gradient_accumulation_steps' is 4 but "
            "--gradient_accumulation_steps is "
            "2; give the same number in both, or only one of them");
  LaunchOptions four;
  four.gradient_accumulation_steps = 4;
  EXPECT_EQ(sharded_error(text, with_flag(four, "gradient_accumulation_steps")), "(no error)");
  EXPECT_EQ(
      sharded_error(
          "distributed_type: DEEPSPEED\ndeepspeed_config:\n  gradient_accumulation_steps: 0\n",
          with_flag(four, "gradient_accumulation_steps")),
      "f.yaml:3: key 'deepspeed_config.gradient_accumulation_steps' expects a whole number from 1 "
      "to 1000000, "
      "got '0'");
}

TEST(ConfigDeepSpeed, BadValuesNameFileLineAndKey) {
  EXPECT_EQ(sharded_error(
                "distributed_type: DEEPSPEED\ndeepspeed_config:\n  offload_optimizer_device: nvme\n"
                "  offload_optimizer_nvme_path: /nvme\n"),
            "f.yaml:3: key 'deepspeed_config.offload_optimizer_device' expects none or cpu (nvme "
            "offloading is not "
            "supported by accelerate-cpp), got 'nvme'");
  EXPECT_EQ(sharded_error("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 4\n"),
            "f.yaml:3: key 'deepspeed_config.zero_stage' expects 0, 1, 2 or 3, got '4'");
  EXPECT_EQ(
      sharded_error("distributed_type: DEEPSPEED\ndeepspeed_config:\n  gradient_clipping: -1\n"),
      "f.yaml:3: key 'deepspeed_config.gradient_clipping' expects a number >= 0 (e.g. 1.0), got "
      "'-1'");
  // Loading checks names and types, whatever the distributed type.
  EXPECT_EQ(sharded_error("distributed_type: MULTI_GPU\ndeepspeed_config:\n  zero_stge: 2\n"),
            "f.yaml:3: unknown key 'deepspeed_config.zero_stge' (did you mean "
            "'deepspeed_config.zero_stage'?); see "
            "'Config file' in docs/cli.md for the keys of deepspeed_config");
  EXPECT_EQ(sharded_error("distributed_type: NO\ndeepspeed_config:\n  zero_stage: two\n"),
            "f.yaml:3: key 'deepspeed_config.zero_stage' expects a whole number, got 'two'");
}

TEST(ConfigDeepSpeed, MultiNodeLaunchersOtherThanStandardAreNoted) {
  ShardedApply a =
      apply_sharded(parse_config_text("distributed_type: DEEPSPEED\n"
                                      "deepspeed_config:\n"
                                      "  deepspeed_hostfile: /job/hostfile\n"
                                      "  deepspeed_multinode_launcher: pdsh\n"
                                      "  zero_stage: 2\n",
                                      "f.yaml"));
  ASSERT_EQ(a.notes.size(), 1u);
  EXPECT_EQ(a.notes[0],
            "f.yaml:2: deepspeed_config: accelerate-cpp ignores deepspeed_hostfile, "
            "deepspeed_multinode_launcher (it "
            "runs one launcher per machine, as Accelerate's standard launcher does)");
  EXPECT_TRUE(apply_sharded(parse_config_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n"
                                              "  deepspeed_multinode_launcher: standard\n",
                                              "f.yaml"))
                  .notes.empty());
}

TEST(ConfigDeepSpeed, TheUseDeepSpeedFlagAppliesASectionOfAnotherType) {
  // Accelerate copies deepspeed_config's keys whatever the distributed type;
  // they count once DeepSpeed is in use.
  LaunchOptions options;
  options.use_deepspeed = true;
  ShardedApply a = apply_sharded(
      parse_config_text(
          "distributed_type: MULTI_GPU\ndeepspeed_config:\n  zero_stage: 1\nfsdp_config:\n"
          "  fsdp_sharding_strategy: SHARD_GRAD_OP\n",
          "f.yaml"),
      with_flag(options, "use_deepspeed"));
  EXPECT_EQ(a.options.zero_stage, 1);
  EXPECT_TRUE(a.options.multi_gpu);
  ASSERT_EQ(a.notes.size(), 1u);
  EXPECT_EQ(a.notes[0], "f.yaml:4: fsdp_config is ignored: --use_deepspeed was given");
  // --use_fsdp replaces the file's DEEPSPEED.
  LaunchOptions fsdp;
  fsdp.use_fsdp = true;
  ShardedApply b = apply_sharded_fixture("hf_deepspeed_zero2.yaml", with_flag(fsdp, "use_fsdp"));
  EXPECT_FALSE(b.options.use_deepspeed);
  ASSERT_EQ(b.notes.size(), 1u);
  EXPECT_NE(b.notes[0].find(":3: deepspeed_config is ignored: --use_fsdp was given"),
            std::string::npos)
      << b.notes[0];
}

TEST(ConfigFsdp, ShardGradOpFileIsZeroStage2) {
  ShardedApply a = apply_sharded_fixture("hf_fsdp_shard_grad_op.yaml");
  EXPECT_TRUE(a.options.use_fsdp);
  EXPECT_EQ(a.options.fsdp_sharding_strategy, settings::FsdpShardingStrategy::kShardGradOp);
  EXPECT_EQ(value_of(a.rank_env, "ACCELERATE_USE_FSDP"), "true");
  EXPECT_EQ(value_of(a.rank_env, "FSDP_SHARDING_STRATEGY"), "SHARD_GRAD_OP");
  std::string type;
  EXPECT_EQ(sharding::deepspeed_plugin_from_environment(a.rank_env, &type)->zero_stage(), 2);
  EXPECT_EQ(type, "FSDP");
  // The wrap and prefetch keys reach the ranks (they matter at stage 3 only,
  // so the missing class is no error here); PyTorch FSDP's own details that
  // change nothing here (use_orig_params) pass silently.
  EXPECT_EQ(value_of(a.rank_env, "FSDP_AUTO_WRAP_POLICY"), "TRANSFORMER_BASED_WRAP");
  EXPECT_EQ(value_of(a.rank_env, "FSDP_TRANSFORMER_CLS_TO_WRAP"), "BertLayer");
  EXPECT_EQ(value_of(a.rank_env, "FSDP_BACKWARD_PREFETCH"), "BACKWARD_PRE");
  EXPECT_EQ(value_of(a.rank_env, "FSDP_FORWARD_PREFETCH"), "false");
  EXPECT_EQ(value_of(a.rank_env, "FSDP_OFFLOAD_PARAMS"), "false");
  EXPECT_EQ(value_of(a.rank_env, "FSDP_STATE_DICT_TYPE"), "SHARDED_STATE_DICT");
  EXPECT_EQ(value_of(a.rank_env, "FSDP_MIN_NUM_PARAMS"), "(unset)");
  EXPECT_TRUE(a.notes.empty()) << a.notes.front();
  EXPECT_NO_THROW(launcher::check_sharded_training(a.options, {}));
}

// What Accelerate 1.x writes for FSDP 2 with its default answers: FULL_SHARD
// (resharding after forward) with the blocks as units.
TEST(ConfigFsdp, CurrentFsdp2FullShardFileIsStage3WithItsWrapPolicy) {
  ShardedApply a = apply_sharded_fixture("hf_fsdp2_full_shard.yaml");
  EXPECT_TRUE(a.options.use_fsdp);
  EXPECT_EQ(value_of(a.rank_env, "FSDP_VERSION"), "2");
  EXPECT_EQ(value_of(a.rank_env, "FSDP_RESHARD_AFTER_FORWARD"), "true");
  EXPECT_EQ(value_of(a.rank_env, "FSDP_AUTO_WRAP_POLICY"), "TRANSFORMER_BASED_WRAP");
  EXPECT_EQ(value_of(a.rank_env, "FSDP_TRANSFORMER_CLS_TO_WRAP"), "GPT2Block");
  EXPECT_EQ(value_of(a.rank_env, "FSDP_STATE_DICT_TYPE"), "SHARDED_STATE_DICT");
  EXPECT_TRUE(a.notes.empty()) << a.notes.front();
  EXPECT_NO_THROW(launcher::check_sharded_training(a.options, {}));
  EXPECT_EQ(sharding::deepspeed_plugin_from_environment(a.rank_env, nullptr)->zero_stage(), 3);
  const auto plugin = sharding::fsdp_plugin_from_environment(a.rank_env);
  ASSERT_TRUE(plugin.has_value());
  const sharding::UnitPolicy policy = sharding::unit_policy_of(*plugin);
  EXPECT_EQ(policy.policy, sharding::AutoWrapPolicy::kTransformerBased);
  EXPECT_EQ(policy.layer_classes, std::vector<std::string>{"GPT2Block"});
}

TEST(ConfigFsdp, SizeBasedWrapTakesItsMinimumAndTheOldPrefetchName) {
  ShardedApply a =
      apply_sharded(parse_config_text("distributed_type: FSDP\nfsdp_config:\n"
                                      "  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n"
                                      "  fsdp_backward_prefetch_policy: BACKWARD_POST\n"
                                      "  fsdp_min_num_params: 20000\n"
                                      "  fsdp_sharding_strategy: FULL_SHARD\n",
                                      "f.yaml"));
  EXPECT_EQ(a.options.fsdp_auto_wrap_policy, FsdpAutoWrapPolicy::kSizeBasedWrap);
  EXPECT_EQ(a.options.fsdp_min_num_params, 20000);
  EXPECT_EQ(a.options.source_of("fsdp_min_num_params"), OptionSource::kConfigFile);
  EXPECT_EQ(value_of(a.rank_env, "FSDP_MIN_NUM_PARAMS"), "20000");
  EXPECT_EQ(value_of(a.rank_env, "FSDP_BACKWARD_PREFETCH"), "BACKWARD_POST");
  const auto policy = sharding::unit_policy_of(*sharding::fsdp_plugin_from_environment(a.rank_env));
  EXPECT_EQ(policy.policy, sharding::AutoWrapPolicy::kSizeBased);
  EXPECT_EQ(policy.min_num_params, 20000);
  // A flag wins over the file.
  LaunchOptions flagged;
  flagged.fsdp_min_num_params = 5;
  ShardedApply b = apply_sharded(parse_config_text("distributed_type: FSDP\nfsdp_config:\n"
                                                   "  fsdp_min_num_params: 20000\n",
                                                   "f.yaml"),
                                 with_flag(flagged, "fsdp_min_num_params"));
  EXPECT_EQ(value_of(b.rank_env, "FSDP_MIN_NUM_PARAMS"), "5");
  EXPECT_EQ(sharded_error("distributed_type: FSDP\nfsdp_config:\n"
                          "  fsdp_auto_wrap_policy: LAYER_WRAP\n"),
            "f.yaml:3: key 'fsdp_config.fsdp_auto_wrap_policy' expects TRANSFORMER_BASED_WRAP, "
            "SIZE_BASED_WRAP or NO_WRAP, got 'LAYER_WRAP'");
  EXPECT_EQ(sharded_error("distributed_type: FSDP\nfsdp_config:\n"
                          "  fsdp_min_num_params: -1\n"),
            "f.yaml:3: key 'fsdp_config.fsdp_min_num_params' expects a whole number of 0 or more, "
            "got '-1'");
}

TEST(ConfigFsdp, CurrentFsdp2FileWithoutReshardingIsZeroStage2) {
  ShardedApply a = apply_sharded_fixture("hf_fsdp2_reshard_false.yaml");
  EXPECT_TRUE(a.options.use_fsdp);
  EXPECT_EQ(value_of(a.rank_env, "FSDP_VERSION"), "2");
  EXPECT_EQ(value_of(a.rank_env, "FSDP_RESHARD_AFTER_FORWARD"), "false");
  EXPECT_EQ(value_of(a.rank_env, "FSDP_SHARDING_STRATEGY"), "(unset)");
  EXPECT_EQ(sharding::deepspeed_plugin_from_environment(a.rank_env, nullptr)->zero_stage(), 2);
  EXPECT_TRUE(a.notes.empty()) << a.notes.front();
}

// Accelerate's FULL_SHARD file with TRANSFORMER_BASED_WRAP and no class
// names (its plugin would take a Transformers model's _no_split_modules).
TEST(ConfigFsdp, FullShardWithoutLayerClassesIsRefusedBeforeAnythingStarts) {
  ShardedApply a = apply_sharded_fixture("hf_fsdp_full_shard.yaml");
  EXPECT_EQ(a.options.fsdp_sharding_strategy, settings::FsdpShardingStrategy::kFullShard);
  try {
    launcher::check_sharded_training(a.options, {});
    ADD_FAILURE() << "no error";
  } catch (const launcher::UsageError& error) {
    EXPECT_EQ(error.what(),
              std::string(CONFIG_FIXTURES_DIR) +
                  "/hf_fsdp_full_shard.yaml:7: key 'fsdp_config.fsdp_auto_wrap_policy': "
                  "FSDP auto wrap policy TRANSFORMER_BASED_WRAP needs the class names of the "
                  "model's blocks: set fsdp_transformer_layer_cls_to_wrap (e.g. Block), or use "
                  "SIZE_BASED_WRAP or NO_WRAP");
  }
  // HYBRID_SHARD (4) runs: sharded within each machine, replicated across them.
  EXPECT_NO_THROW(launcher::check_sharded_training(
      apply_sharded(
          parse_config_text("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: 4\n",
                            "f.yaml"))
          .options,
      {}));
}

TEST(ConfigFsdp, OldUnprefixedKeysAndOffloading) {
  // Accelerate before 0.12 wrote the keys without "fsdp_", the strategy as a number.
  ShardedApply a =
      apply_sharded(parse_config_text("distributed_type: FSDP\nfsdp_config:\n  min_num_params: "
                                      "2000\n  offload_params: false\n  sharding_strategy: 2\n",
                                      "f.yaml"));
  EXPECT_EQ(a.options.fsdp_sharding_strategy, settings::FsdpShardingStrategy::kShardGradOp);
  EXPECT_EQ(value_of(a.rank_env, "FSDP_MIN_NUM_PARAMS"), "2000");
  // Offloading reaches the ranks, which decide: a note on CPU, an error on CUDA.
  ShardedApply offload =
      apply_sharded(parse_config_text("distributed_type: FSDP\nfsdp_config:\n"
                                      "  fsdp_offload_params: true\n"
                                      "  fsdp_sharding_strategy: SHARD_GRAD_OP\n",
                                      "f.yaml"));
  EXPECT_EQ(value_of(offload.rank_env, "FSDP_OFFLOAD_PARAMS"), "true");
  EXPECT_NO_THROW(launcher::check_sharded_training(offload.options, {}));
  EXPECT_EQ(
      sharded_error("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: ZERO2\n"),
      "f.yaml:3: key 'fsdp_config.fsdp_sharding_strategy' expects FULL_SHARD, SHARD_GRAD_OP, "
      "NO_SHARD, "
      "HYBRID_SHARD or HYBRID_SHARD_ZERO2 (or 1-5), got 'ZERO2'");
  // Under another distributed type nothing is judged, only noted.
  EXPECT_EQ(
      sharded_error("distributed_type: MULTI_GPU\nfsdp_config:\n  fsdp_offload_params: true\n"),
      "(no error)");
}

// Accelerate's fsdp_cpu_ram_efficient_loading and fsdp_sync_module_states
// are applied (no longer ignored keys), reach the ranks' plugin, and their
// forbidden pair is refused before anything starts.
TEST(ConfigFsdp, CpuRamEfficientLoadingAndSyncModuleStatesAreApplied) {
  // Accelerate's own file: both true.
  const ConfigFile file =
      load_config_file(std::string(CONFIG_FIXTURES_DIR) + "/hf_fsdp_shard_grad_op.yaml");
  for (const char* key :
       {"fsdp_config.fsdp_cpu_ram_efficient_loading", "fsdp_config.fsdp_sync_module_states"}) {
    EXPECT_NE(file.find(key), nullptr) << key;
    EXPECT_TRUE(std::none_of(file.ignored.begin(), file.ignored.end(),
                             [&](const ConfigValue& value) { return value.key == key; }))
        << key << " is still an ignored key";
  }
  ShardedApply a = apply_sharded(file);
  EXPECT_EQ(a.options.fsdp_cpu_ram_efficient_loading, true);
  EXPECT_EQ(a.options.fsdp_sync_module_states, true);
  EXPECT_EQ(a.options.source_of("fsdp_cpu_ram_efficient_loading"), OptionSource::kConfigFile);
  EXPECT_EQ(a.options.source_of("fsdp_sync_module_states"), OptionSource::kConfigFile);
  EXPECT_EQ(value_of(a.rank_env, "FSDP_CPU_RAM_EFFICIENT_LOADING"), "true");
  EXPECT_EQ(value_of(a.rank_env, "FSDP_SYNC_MODULE_STATES"), "true");
  EXPECT_TRUE(a.notes.empty()) << a.notes.front();
  const auto plugin = sharding::fsdp_plugin_from_environment(a.rank_env);
  ASSERT_TRUE(plugin.has_value());
  EXPECT_TRUE(plugin->cpu_ram_efficient_loading());
  EXPECT_TRUE(plugin->sync_module_states());

  // The other values, in the old unprefixed spelling too; a flag wins over the file.
  ShardedApply b =
      apply_sharded(parse_config_text("distributed_type: FSDP\nfsdp_config:\n"
                                      "  cpu_ram_efficient_loading: false\n"
                                      "  fsdp_sync_module_states: false\n",
                                      "f.yaml"));
  EXPECT_EQ(value_of(b.rank_env, "FSDP_CPU_RAM_EFFICIENT_LOADING"), "false");
  EXPECT_EQ(value_of(b.rank_env, "FSDP_SYNC_MODULE_STATES"), "false");
  EXPECT_TRUE(b.notes.empty()) << b.notes.front();
  EXPECT_NO_THROW(launcher::check_sharded_training(b.options, {}));
  const auto off = sharding::fsdp_plugin_from_environment(b.rank_env);
  ASSERT_TRUE(off.has_value());
  EXPECT_FALSE(off->cpu_ram_efficient_loading());
  EXPECT_FALSE(off->sync_module_states());
  LaunchOptions flagged;
  flagged.fsdp_sync_module_states = true;
  ShardedApply c = apply_sharded(parse_config_text("distributed_type: FSDP\nfsdp_config:\n"
                                                   "  fsdp_sync_module_states: false\n",
                                                   "f.yaml"),
                                 with_flag(flagged, "fsdp_sync_module_states"));
  EXPECT_EQ(value_of(c.rank_env, "FSDP_SYNC_MODULE_STATES"), "true");

  // Accelerate's rule: efficient loading needs module states synced.
  ShardedApply forbidden =
      apply_sharded(parse_config_text("distributed_type: FSDP\nfsdp_config:\n"
                                      "  fsdp_cpu_ram_efficient_loading: true\n"
                                      "  fsdp_sync_module_states: false\n",
                                      "f.yaml"));
  try {
    launcher::check_sharded_training(forbidden.options, {});
    ADD_FAILURE() << "no error";
  } catch (const launcher::UsageError& error) {
    EXPECT_STREQ(error.what(),
                 "f.yaml:3: key 'fsdp_config.fsdp_cpu_ram_efficient_loading', f.yaml:4: key "
                 "'fsdp_config.fsdp_sync_module_states': "
                 "FSDP cpu_ram_efficient_loading is true but sync_module_states is false; "
                 "Accelerate requires sync_module_states to be true when cpu_ram_efficient_loading "
                 "is true (every process but the main one would keep empty weights): set "
                 "fsdp_sync_module_states to true, or fsdp_cpu_ram_efficient_loading to false");
  }
  EXPECT_EQ(sharded_error("distributed_type: FSDP\nfsdp_config:\n"
                          "  fsdp_cpu_ram_efficient_loading: maybe\n"),
            "f.yaml:3: key 'fsdp_config.fsdp_cpu_ram_efficient_loading' expects true or false, got "
            "'maybe'");
  EXPECT_EQ(sharded_error("distributed_type: FSDP\nfsdp_config:\n"
                          "  fsdp_sync_module_states: maybe\n"),
            "f.yaml:3: key 'fsdp_config.fsdp_sync_module_states' expects true or false, got "
            "'maybe'");
}

TEST(ConfigFsdp, ActivationCheckpointingIsNotedWhenAskedFor) {
  ShardedApply a =
      apply_sharded(parse_config_text("distributed_type: FSDP\nfsdp_config:\n"
                                      "  fsdp_activation_checkpointing: true\n"
                                      "  fsdp_sharding_strategy: NO_SHARD\n",
                                      "f.yaml"));
  ASSERT_EQ(a.notes.size(), 1u);
  EXPECT_EQ(
      a.notes[0],
      "f.yaml:2: fsdp_config: accelerate-cpp ignores fsdp_activation_checkpointing (it has no "
      "activation checkpointing)");
}

}  // namespace
}  // namespace accelerate::config
