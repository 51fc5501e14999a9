// Accelerate 1.x's parallelism sizes through `accelerate launch`: the
// --parallelism_config_* flags and the config file's parallelism_config
// section reach the ranks as PARALLELISM_CONFIG_*, and sizes that cannot
// run are refused before any process starts, naming where each was written.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config_file.h"
#include "launcher/child_environment.h"
#include "launcher/config_application.h"
#include "launcher/launch_test_support.h"
#include "launcher/sharding_check.h"

namespace accelerate::launcher {
namespace {

std::string parallelism_refusal(const LaunchOptions& options) {
  try {
    check_sharded_training(options, {});
  } catch (const UsageError& error) {
    return error.what();
  }
  return "(no error)";
}

const std::vector<std::string> kTwoByTwo = {
    "--use_fsdp", "--use_parallelism_config",           "--parallelism_config_dp_replicate_size",
    "2",          "--parallelism_config_dp_shard_size", "2"};

std::vector<std::string> args_with(std::vector<std::string> args,
                                   const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(LaunchParallelism, TwoReplicasOfTwoShardsReachTheRanks) {
  const LaunchOptions options = resolved(args_with(kTwoByTwo, {"--num_processes", "4", "p"}));
  EXPECT_EQ(parallelism_refusal(options), "(no error)");
  const Environment env = build_child_environment(options, 0, {}, 4);
  EXPECT_EQ(env.at("ACCELERATE_USE_PARALLELISM_CONFIG"), "true");
  EXPECT_EQ(env.at("PARALLELISM_CONFIG_DP_REPLICATE_SIZE"), "2");
  EXPECT_EQ(env.at("PARALLELISM_CONFIG_DP_SHARD_SIZE"), "2");
  EXPECT_EQ(env.count("PARALLELISM_CONFIG_TP_SIZE"), 0u);  // only what was given
}

TEST(LaunchParallelism, TensorParallelTimesHybridShardingReachesTheRanks) {
  const LaunchOptions options = resolved(
      args_with(kTwoByTwo, {"--parallelism_config_tp_size", "2", "--num_processes", "8", "p"}));
  EXPECT_EQ(parallelism_refusal(options), "(no error)");
  const Environment env = build_child_environment(options, 0, {}, 8);
  EXPECT_EQ(env.at("PARALLELISM_CONFIG_TP_SIZE"), "2");
  EXPECT_EQ(env.at("PARALLELISM_CONFIG_DP_SHARD_SIZE"), "2");
  EXPECT_EQ(env.count("PARALLELISM_CONFIG_TP_SEQUENCE_PARALLEL"), 0u);
  const Environment megatron = build_child_environment(
      resolved(args_with(kTwoByTwo, {"--parallelism_config_tp_size", "2",
                                     "--parallelism_config_tp_sequence_parallel", "true",
                                     "--num_processes", "8", "p"})),
      0, {}, 8);
  EXPECT_EQ(megatron.at("PARALLELISM_CONFIG_TP_SEQUENCE_PARALLEL"), "true");
}

TEST(LaunchParallelism, SizesThatCannotRunAreOneLineNamingTheirFlags) {
  EXPECT_EQ(
      parallelism_refusal(resolved(args_with(kTwoByTwo, {"--num_processes", "3", "p"}))),
      "parallelism_config: dp_replicate_size 2 x dp_shard_size 2 is 4 processes, but the "
      "job has 3 (--parallelism_config_dp_replicate_size, --parallelism_config_dp_shard_size)");
  EXPECT_EQ(
      parallelism_refusal(
          resolved({"--use_parallelism_config", "--parallelism_config_dp_shard_size", "2",
                    "--num_processes", "2", "p"})),
      "parallelism_config: dp_shard_size 2 shards the model, which needs FSDP (--use_fsdp, or "
      "distributed_type: FSDP) (--parallelism_config_dp_shard_size)");
  // Tensor parallelism counts in the product.
  EXPECT_EQ(parallelism_refusal(resolved(args_with(
                kTwoByTwo, {"--parallelism_config_tp_size", "2", "--num_processes", "4", "p"}))),
            "parallelism_config: dp_replicate_size 2 x dp_shard_size 2 x tp_size 2 is 8 "
            "processes, but the job has 4 (--parallelism_config_dp_replicate_size, "
            "--parallelism_config_dp_shard_size, --parallelism_config_tp_size)");
  EXPECT_EQ(
      parallelism_refusal(resolved({"--use_parallelism_config", "--parallelism_config_tp_size", "3",
                                    "--num_processes", "4", "p"})),
      "parallelism_config: tp_size 3 does not divide the job's 4 processes "
      "(--parallelism_config_tp_size)");
  EXPECT_EQ(
      parallelism_refusal(resolved({"--use_parallelism_config", "--parallelism_config_cp_size", "2",
                                    "--num_processes", "4", "p"})),
      "--parallelism_config_cp_size 2 asks for context parallelism, which accelerate-cpp "
      "does not have: set it to 1");
  EXPECT_EQ(parallelism_refusal(resolved({"--use_fsdp", "--use_parallelism_config",
                                          "--parallelism_config_dp_replicate_size", "2",
                                          "--num_processes", "2", "p"})),
            "parallelism_config: dp_shard_size 1 with FSDP shards nothing (2 whole replicas are "
            "data parallelism: leave FSDP off, or shard over more processes) "
            "(--parallelism_config_dp_replicate_size)");
  // Without FSDP, replicas alone are data parallelism.
  EXPECT_EQ(parallelism_refusal(
                resolved({"--use_parallelism_config", "--parallelism_config_dp_replicate_size", "2",
                          "--num_processes", "2", "p"})),
            "(no error)");
}

TEST(LaunchParallelism, SizesWithoutTheSwitchAreNotedAndNotGiven) {
  const LaunchOptions options = resolved(
      {"--use_fsdp", "--parallelism_config_dp_shard_size", "2", "--num_processes", "2", "p"});
  const std::vector<std::string> notes = check_sharded_training(options, {});
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0],
            "--parallelism_config_dp_shard_size is ignored: the parallelism sizes are not in use "
            "(give --use_parallelism_config, or a parallelism_config section in the config file)");
  EXPECT_EQ(build_child_environment(options, 0, {}, 2).count("PARALLELISM_CONFIG_DP_SHARD_SIZE"),
            0u);
}

TEST(LaunchParallelism, TheConfigFilesSectionPutsItsSizesInUseAndNamesItsLines) {
  const std::string text =
      "distributed_type: FSDP\n"
      "num_processes: 4\n"
      "parallelism_config:\n"
      "  parallelism_config_dp_shard_size: 2\n"
      "  parallelism_config_sp_size: 2\n"
      "  parallelism_config_sp_backend: deepspeed\n"
      "  parallelism_config_sp_seq_length_is_variable: true\n";
  LaunchOptions options;
  const std::vector<std::string> notes =
      apply_config_file(config::parse_config_text(text, "c.yaml"), options);
  resolve_launch_options(options, MachineFacts{});
  EXPECT_TRUE(options.use_parallelism_config);
  EXPECT_EQ(options.parallelism_config_dp_shard_size, 2);
  EXPECT_EQ(options.parallelism_config_sp_size, 2);
  EXPECT_EQ(notes, std::vector<std::string>{});  // sp_size is used now, not ignored
  EXPECT_EQ(parallelism_refusal(options), "(no error)");
  const Environment env = build_child_environment(options, 0, {}, 4);
  EXPECT_EQ(env.at("PARALLELISM_CONFIG_SP_SIZE"), "2");
  EXPECT_EQ(env.at("PARALLELISM_CONFIG_SP_BACKEND"), "deepspeed");
  options.num_processes = 8;
  EXPECT_EQ(parallelism_refusal(options),
            "parallelism_config: dp_replicate_size 1 x dp_shard_size 2 x sp_size 2 is 4 "
            "processes, but the job has 8 (c.yaml:4: key "
            "'parallelism_config.parallelism_config_dp_shard_size', c.yaml:5: key "
            "'parallelism_config.parallelism_config_sp_size')");
}

TEST(LaunchParallelism, SequenceParallelSizeFromTheFlagReachesTheRanks) {
  // Accelerate's spelling and its dashed form.
  for (const char* flag : {"--parallelism_config_sp_size", "--parallelism-config-sp-size"}) {
    const LaunchOptions options =
        resolved({"--use_parallelism_config", flag, "2", "--num_processes", "4", "p"});
    EXPECT_EQ(parallelism_refusal(options), "(no error)") << flag;
    const Environment env = build_child_environment(options, 0, {}, 4);
    EXPECT_EQ(env.at("PARALLELISM_CONFIG_SP_SIZE"), "2") << flag;
  }
}

TEST(LaunchParallelism, SequenceParallelSizesThatCannotRunAreRefused) {
  EXPECT_EQ(
      parallelism_refusal(resolved({"--use_parallelism_config", "--parallelism_config_sp_size", "3",
                                    "--num_processes", "4", "p"})),
      "parallelism_config: sp_size 3 does not divide the job's 4 processes "
      "(--parallelism_config_sp_size)");
  EXPECT_EQ(parallelism_refusal(
                resolved({"--use_parallelism_config", "--parallelism_config_dp_replicate_size", "2",
                          "--parallelism_config_sp_size", "2", "--num_processes", "2", "p"})),
            "parallelism_config: dp_replicate_size 2 x dp_shard_size 1 x sp_size 2 is 4 processes, "
            "but the job has 2 (--parallelism_config_dp_replicate_size, "
            "--parallelism_config_sp_size)");
  // Accelerate's only backend is "deepspeed"; anything else is refused
  // (when the flags are read or when the sizes are judged), naming it.
  std::string refusal = "(no error)";
  try {
    refusal =
        parallelism_refusal(resolved({"--use_parallelism_config", "--parallelism_config_sp_backend",
                                      "ring", "--num_processes", "2", "p"}));
  } catch (const std::exception& error) {
    refusal = error.what();
  }
  EXPECT_NE(refusal.find("ring"), std::string::npos) << refusal;
}

}  // namespace
}  // namespace accelerate::launcher
