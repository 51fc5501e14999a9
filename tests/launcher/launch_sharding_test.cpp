// Sharded training (ZeRO) through `accelerate launch`: the DeepSpeed and
// FSDP flags reach the ranks as Accelerate's variables, a config file's
// sections do too, and everything the ranks would refuse fails before any
// process starts, in one line with exit code 2 (docs/launching.md,
// "Sharded training").
#include <gtest/gtest.h>

#include <fstream>

#include "launcher/child_environment.h"
#include "launcher/launch_test_support.h"
#include "launcher/sharding_check.h"
#include "support/launcher_process.h"

namespace accelerate::launcher {
namespace {

using testing::run_launcher;
using testing::RunResult;
using testing::split_lines;
using testing::TemporaryFolder;

Environment rank0_environment(const std::vector<std::string>& args) {
  return build_child_environment(resolved(args), 0, {}, 2);
}

std::string sharding_refusal(const std::vector<std::string>& args,
                             const Environment& launcher_env = {}) {
  try {
    check_sharded_training(resolved(args), launcher_env);
  } catch (const UsageError& error) {
    return error.what();
  }
  return "(no error)";
}

// A small DeepSpeed config file in `folder`.
std::string write_deepspeed_json(const TemporaryFolder& folder, const std::string& fp16_enabled) {
  const std::string path = folder.path() + "/zero2.json";
  std::ofstream(path) << "{\"fp16\": {\"enabled\": " << fp16_enabled
                      << "}, \"zero_optimization\": {\"stage\": 2}, "
                         "\"train_micro_batch_size_per_gpu\": \"auto\"}\n";
  return path;
}

TEST(LaunchSharding, DeepSpeedFlagsBecomeAcceleratesVariables) {
  const Environment env = rank0_environment(
      {"--use_deepspeed", "--zero_stage", "1", "--gradient_clipping", "1",
       "--offload_optimizer_device", "cpu", "--offload_param_device", "none",
       "--deepspeed_config_file", "ds.json", "--zero3_init_flag", "false",
       "--zero3_save_16bit_model", "true", "--gradient_accumulation_steps", "4", "prog"});
  EXPECT_EQ(env.at("ACCELERATE_USE_DEEPSPEED"), "true");
  EXPECT_EQ(env.at("ACCELERATE_DEEPSPEED_ZERO_STAGE"), "1");
  EXPECT_EQ(env.at("ACCELERATE_GRADIENT_CLIPPING"), "1.0");
  EXPECT_EQ(env.at("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE"), "cpu");
  EXPECT_EQ(env.at("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE"), "none");
  EXPECT_EQ(env.at("ACCELERATE_DEEPSPEED_CONFIG_FILE"), "ds.json");
  EXPECT_EQ(env.at("ACCELERATE_DEEPSPEED_ZERO3_INIT"), "false");
  EXPECT_EQ(env.at("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL"), "true");
  EXPECT_EQ(env.at("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"), "4");
  EXPECT_EQ(env.count("ACCELERATE_USE_FSDP"), 0u);
}

TEST(LaunchSharding, OnlyTheKindInUseIsWritten) {
  const Environment plain =
      rank0_environment({"--zero_stage", "1", "--fsdp_sharding_strategy", "NO_SHARD", "prog"});
  EXPECT_EQ(plain.count("ACCELERATE_USE_DEEPSPEED"), 0u);
  EXPECT_EQ(plain.count("ACCELERATE_DEEPSPEED_ZERO_STAGE"), 0u);
  EXPECT_EQ(plain.count("FSDP_SHARDING_STRATEGY"), 0u);
  const Environment fsdp =
      rank0_environment({"--use_fsdp", "--fsdp_sharding_strategy", "shard_grad_op",
                         "--fsdp_version", "1", "--zero_stage", "1", "prog"});
  EXPECT_EQ(fsdp.at("ACCELERATE_USE_FSDP"), "true");
  EXPECT_EQ(fsdp.at("FSDP_SHARDING_STRATEGY"), "SHARD_GRAD_OP");
  EXPECT_EQ(fsdp.at("FSDP_VERSION"), "1");
  EXPECT_EQ(fsdp.count("ACCELERATE_DEEPSPEED_ZERO_STAGE"), 0u);
  // ... and the flags of the other kind are noted as ignored.
  const auto notes =
      check_sharded_training(resolved({"--use_fsdp", "--fsdp_sharding_strategy", "2",
                                       "--zero_stage", "1", "--gradient_clipping", "1", "p"}),
                             {});
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0],
            "--zero_stage, --gradient_clipping are ignored: DeepSpeed is not in use (give "
            "--use_deepspeed, or "
            "distributed_type: DEEPSPEED in the config file)");
}

TEST(LaunchSharding, FsdpWrapPolicyFlagsBecomeAcceleratesVariables) {
  const Environment env = rank0_environment(
      {"--use_fsdp", "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP",
       "--fsdp_transformer_layer_cls_to_wrap", "Block,Mlp", "--fsdp_min_num_params", "2000",
       "--fsdp_backward_prefetch", "BACKWARD_PRE", "--fsdp_forward_prefetch", "yes",
       "--fsdp_offload_params", "false", "--fsdp_state_dict_type", "sharded_state_dict", "prog"});
  EXPECT_EQ(env.at("ACCELERATE_USE_FSDP"), "true");
  EXPECT_EQ(env.at("FSDP_AUTO_WRAP_POLICY"), "TRANSFORMER_BASED_WRAP");
  EXPECT_EQ(env.at("FSDP_TRANSFORMER_CLS_TO_WRAP"), "Block,Mlp");
  EXPECT_EQ(env.at("FSDP_MIN_NUM_PARAMS"), "2000");
  EXPECT_EQ(env.at("FSDP_BACKWARD_PREFETCH"), "BACKWARD_PRE");
  EXPECT_EQ(env.at("FSDP_FORWARD_PREFETCH"), "true");
  EXPECT_EQ(env.at("FSDP_OFFLOAD_PARAMS"), "false");
  EXPECT_EQ(env.at("FSDP_STATE_DICT_TYPE"), "SHARDED_STATE_DICT");
  // Only what was given is written: the ranks fall back to Accelerate's defaults.
  const Environment plain = rank0_environment({"--use_fsdp", "prog"});
  EXPECT_EQ(plain.count("FSDP_AUTO_WRAP_POLICY"), 0u);
  EXPECT_EQ(plain.count("FSDP_MIN_NUM_PARAMS"), 0u);
  // Without FSDP they are written nowhere, and noted once.
  const Environment none = rank0_environment({"--fsdp_auto_wrap_policy", "NO_WRAP", "prog"});
  EXPECT_EQ(none.count("FSDP_AUTO_WRAP_POLICY"), 0u);
  const auto notes = check_sharded_training(
      resolved({"--fsdp_auto_wrap_policy", "NO_WRAP", "--fsdp_min_num_params", "5", "p"}), {});
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0],
            "--fsdp_auto_wrap_policy, --fsdp_min_num_params are ignored: FSDP is not in use (give "
            "--use_fsdp, or distributed_type: FSDP in the config file)");
}

// Accelerate's FSDP_CPU_RAM_EFFICIENT_LOADING and FSDP_SYNC_MODULE_STATES:
// written for the ranks when given, and their forbidden pair (efficient
// loading without syncing module states) refused before anything starts.
TEST(LaunchSharding, CpuRamEfficientLoadingAndSyncModuleStatesReachTheRanks) {
  const Environment on = rank0_environment({"--use_fsdp", "--fsdp_cpu_ram_efficient_loading",
                                            "true", "--fsdp_sync_module_states", "true", "prog"});
  EXPECT_EQ(on.at("FSDP_CPU_RAM_EFFICIENT_LOADING"), "true");
  EXPECT_EQ(on.at("FSDP_SYNC_MODULE_STATES"), "true");
  const Environment off = rank0_environment({"--use_fsdp", "--fsdp-cpu-ram-efficient-loading=no",
                                             "--fsdp_sync_module_states", "False", "prog"});
  EXPECT_EQ(off.at("FSDP_CPU_RAM_EFFICIENT_LOADING"), "false");
  EXPECT_EQ(off.at("FSDP_SYNC_MODULE_STATES"), "false");
  // Only what was given is written: the ranks fall back to false and true.
  const Environment plain = rank0_environment({"--use_fsdp", "prog"});
  EXPECT_EQ(plain.count("FSDP_CPU_RAM_EFFICIENT_LOADING"), 0u);
  EXPECT_EQ(plain.count("FSDP_SYNC_MODULE_STATES"), 0u);
  EXPECT_EQ(sharding_refusal({"--use_fsdp", "--fsdp_cpu_ram_efficient_loading", "true", "p"}),
            "(no error)");
  EXPECT_EQ(sharding_refusal({"--use_fsdp", "--fsdp_sync_module_states", "false", "p"}),
            "(no error)");
  const std::string forbidden =
      "FSDP cpu_ram_efficient_loading is true but sync_module_states is false; Accelerate "
      "requires sync_module_states to be true when cpu_ram_efficient_loading is true (every "
      "process but the main one would keep empty weights): set fsdp_sync_module_states to true, "
      "or fsdp_cpu_ram_efficient_loading to false";
  // Each refusal names where its deciding values were written.
  const std::string flags = "--fsdp_cpu_ram_efficient_loading, --fsdp_sync_module_states: ";
  EXPECT_EQ(sharding_refusal({"--use_fsdp", "--fsdp_cpu_ram_efficient_loading", "true",
                              "--fsdp_sync_module_states", "false", "p"}),
            flags + forbidden);
  // At every strategy, as Accelerate's plugin checks it, and from an exported variable too.
  EXPECT_EQ(sharding_refusal({"--use_fsdp", "--fsdp_sharding_strategy", "NO_SHARD",
                              "--fsdp_cpu_ram_efficient_loading", "true",
                              "--fsdp_sync_module_states", "false", "p"}),
            flags + forbidden);
  EXPECT_EQ(sharding_refusal({"--use_fsdp", "--fsdp_cpu_ram_efficient_loading", "true", "p"},
                             {{"FSDP_SYNC_MODULE_STATES", "false"}}),
            "--fsdp_cpu_ram_efficient_loading, FSDP_SYNC_MODULE_STATES: " + forbidden);
  EXPECT_EQ(usage_error_of({"--fsdp_cpu_ram_efficient_loading", "maybe", "p"}),
            "--fsdp_cpu_ram_efficient_loading expects true or false (or 1/0, yes/no), got 'maybe'");
  EXPECT_EQ(usage_error_of({"--fsdp_sync_module_states", "maybe", "p"}),
            "--fsdp_sync_module_states expects true or false (or 1/0, yes/no), got 'maybe'");
  // Without FSDP they are written nowhere, and noted once.
  const auto notes = check_sharded_training(resolved({"--fsdp_cpu_ram_efficient_loading", "true",
                                                      "--fsdp_sync_module_states", "false", "p"}),
                                            {});
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0],
            "--fsdp_cpu_ram_efficient_loading, --fsdp_sync_module_states are ignored: FSDP is not "
            "in use (give --use_fsdp, or distributed_type: FSDP in the config file)");
}

TEST(LaunchSharding, BadFlagValuesAreOneLine) {
  EXPECT_EQ(usage_error_of({"--offload_optimizer_device", "nvme", "p"}),
            "--offload_optimizer_device expects none or cpu (nvme offloading is not supported by "
            "accelerate-cpp), "
            "got 'nvme'");
  EXPECT_EQ(usage_error_of({"--zero_stage", "4", "p"}),
            "--zero_stage expects 0, 1, 2 or 3, got '4'");
  EXPECT_EQ(usage_error_of({"--gradient_clipping", "-1", "p"}),
            "--gradient_clipping expects a number >= 0 (e.g. 1.0), got '-1'");
  EXPECT_EQ(usage_error_of({"--fsdp_version", "3", "p"}), "--fsdp_version expects 1 or 2, got '3'");
  EXPECT_EQ(usage_error_of({"--fsdp_auto_wrap_policy", "BLOCK_WRAP", "p"}),
            "--fsdp_auto_wrap_policy expects TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP, "
            "got 'BLOCK_WRAP'");
  EXPECT_EQ(usage_error_of({"--fsdp_min_num_params", "1e8", "p"}),
            "--fsdp_min_num_params expects a whole number of 0 or more, got '1e8'");
  EXPECT_EQ(usage_error_of({"--fsdp_transformer_layer_cls_to_wrap", ",", "p"}),
            "--fsdp_transformer_layer_cls_to_wrap expects class names separated by commas (e.g. "
            "Block or Block,Mlp), got ','");
  EXPECT_EQ(usage_error_of({"--fsdp_backward_prefetch", "BACKWARD", "p"}),
            "--fsdp_backward_prefetch expects BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH, got "
            "'BACKWARD'");
  EXPECT_EQ(usage_error_of({"--zero3_init_flag", "perhaps", "p"}),
            "--zero3_init_flag expects true or false (or 1/0, yes/no), got 'perhaps'");
  EXPECT_EQ(usage_error_of({"--use_deepspeed", "--use_fsdp", "p"}),
            "--use_deepspeed and --use_fsdp conflict: both choose how ZeRO shards the training; "
            "give one of them");
}

TEST(LaunchSharding, WhatTheRanksWouldRefuseIsRefusedFirst) {
  // FULL_SHARD (Accelerate's default) is stage 3 with NO_WRAP's (no) units.
  EXPECT_EQ(sharding_refusal({"--use_fsdp", "p"}), "(no error)");
  EXPECT_EQ(sharding_refusal({"--use_fsdp", "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP",
                              "--fsdp_transformer_layer_cls_to_wrap", "Block", "p"}),
            "(no error)");
  EXPECT_EQ(
      sharding_refusal({"--use_fsdp", "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP", "p"}),
      "--fsdp_auto_wrap_policy: FSDP auto wrap policy TRANSFORMER_BASED_WRAP needs the "
      "class names of the model's "
      "blocks: set fsdp_transformer_layer_cls_to_wrap (e.g. Block), or use SIZE_BASED_WRAP "
      "or NO_WRAP");
  // FSDP 2 without resharding is stage 2: it has no units, so needs no classes.
  EXPECT_EQ(sharding_refusal({"--use_fsdp", "--fsdp_version", "2", "--fsdp_reshard_after_forward",
                              "false", "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP", "p"}),
            "(no error)");
  EXPECT_EQ(sharding_refusal({"--use_fsdp", "--fsdp_sharding_strategy", "HYBRID_SHARD", "p"}),
            "(no error)");
  // Stage 3 runs (its units are the model's repeated blocks).
  EXPECT_EQ(sharding_refusal({"--use_deepspeed", "--zero_stage", "3", "p"}), "(no error)");
  EXPECT_EQ(sharding_refusal({"--use_deepspeed", "--deepspeed_config_file", "/no/such.json", "p"}),
            "/no/such.json: cannot read the DeepSpeed config file: No such file or directory");
  // A variable exported in the launcher's shell counts as the ranks would see it.
  EXPECT_EQ(sharding_refusal(
                {"p"}, {{"ACCELERATE_USE_DEEPSPEED", "true"}, {"ACCELERATE_USE_FSDP", "true"}}),
            "ACCELERATE_USE_DEEPSPEED and ACCELERATE_USE_FSDP are both true; choose one (they "
            "select the same ZeRO "
            "engine)");
  EXPECT_EQ(sharding_refusal({"--use_deepspeed", "p"}), "(no error)");
  EXPECT_EQ(sharding_refusal({"--use_fsdp", "--fsdp_sharding_strategy", "NO_SHARD", "p"}),
            "(no error)");
}

TEST(LaunchSharding, MixedPrecisionMustFitTheDeepSpeedFile) {
  TemporaryFolder folder;
  const std::string path = write_deepspeed_json(folder, "true");
  EXPECT_EQ(
      sharding_refusal(
          {"--use_deepspeed", "--deepspeed_config_file", path, "--mixed_precision", "bf16", "p"}),
      path +
          ": fp16.enabled is true but mixed_precision is bf16; Accelerate refuses the pair: set "
          "fp16.enabled to false or \"auto\", or mixed_precision to fp16");
  EXPECT_EQ(sharding_refusal({"--use_deepspeed", "--deepspeed_config_file", path,
                              "--mixed_precision", "fp16", "p"}),
            "(no error)");
  std::ofstream(folder.path() + "/broken.json") << "{\"zero_optimization\": {\"stage\": 2},\n";
  EXPECT_EQ(sharding_refusal(
                {"--use_deepspeed", "--deepspeed_config_file", folder.path() + "/broken.json", "p"})
                .rfind(folder.path() + "/broken.json: line 2, column 1: not valid JSON", 0),
            0u);
}

// ZeRO++ hpZ's groups must fit inside a machine: judged with the processes
// each machine starts (--num_processes / --num_machines), as the ranks judge it.
TEST(LaunchSharding, HpzGroupsThatDoNotDivideAMachineAreRefusedFirst) {
  TemporaryFolder folder;
  const auto write = [&](int stage) {
    const std::string path = folder.path() + "/zero" + std::to_string(stage) + "_hpz.json";
    std::ofstream(path) << "{\"zero_optimization\": {\"stage\": " << stage
                        << ", \"zero_hpz_partition_size\": 4}, "
                           "\"train_micro_batch_size_per_gpu\": \"auto\"}\n";
    return path;
  };
  const std::string stage3 = write(3);
  const auto launch = [&](const std::string& path, const std::string& processes,
                          const std::string& machines) {
    return sharding_refusal({"--use_deepspeed", "--deepspeed_config_file", path, "--num_processes",
                             processes, "--num_machines", machines, "--machine_rank", "0",
                             "--main_process_ip", "10.0.0.1", "p"});
  };
  EXPECT_EQ(launch(stage3, "8", "2"), "(no error)");  // groups of 4 on machines of 4
  EXPECT_EQ(launch(stage3, "4", "2"),
            stage3 +
                ": zero_optimization.zero_hpz_partition_size 4 does not divide the 2 processes of "
                "each machine (the secondary copy of the parameters is partitioned within a "
                "machine); use a divisor of 2, or 1 for plain stage 3");
  // Below stage 3 DeepSpeed ignores the key (the ranks note it).
  EXPECT_EQ(launch(write(2), "4", "2"), "(no error)");
}

TEST(LaunchSharding, RanksOfADeepSpeedConfigFileGetItsSettings) {
  TemporaryFolder folder;
  const std::string json = write_deepspeed_json(folder, "\"auto\"");
  const std::string config = folder.path() + "/ds.yaml";
  std::ofstream(config) << "compute_environment: LOCAL_MACHINE\n"
                           "deepspeed_config:\n"
                           "  deepspeed_config_file: "
                        << json
                        << "\n"
                           "  zero3_init_flag: false\n"
                           "distributed_type: DEEPSPEED\n"
                           "num_processes: 2\n"
                           "use_cpu: true\n";
  RunResult result = run_launcher(
      {"launch", "-q", "--config_file", config, "--main_process_port", "0", kProbe, "env",
       "ACCELERATE_USE_DEEPSPEED", "ACCELERATE_DEEPSPEED_CONFIG_FILE", "ACCELERATE_USE_CPU"},
      {{"SLURM_JOB_ID", std::nullopt}});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string prefix = "[rank" + std::to_string(rank) + "]: ";
    EXPECT_NE(result.out.find(prefix + "ACCELERATE_USE_DEEPSPEED=true\n"), std::string::npos)
        << result.out;
    EXPECT_NE(result.out.find(prefix + "ACCELERATE_DEEPSPEED_CONFIG_FILE=" + json + "\n"),
              std::string::npos);
    EXPECT_NE(result.out.find(prefix + "ACCELERATE_USE_CPU=true\n"), std::string::npos);
  }
}

TEST(LaunchSharding, RefusalsExitWithTwoAndOneLine) {
  TemporaryFolder folder;
  const std::string config = folder.path() + "/fsdp.yaml";
  std::ofstream(config)
      << "distributed_type: FSDP\nfsdp_config:\n  fsdp_cpu_ram_efficient_loading: true\n"
         "  fsdp_sync_module_states: false\nnum_processes: 2\nuse_cpu: true\n";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"launch", "--config_file", config, kProbe, "exit", "0"},
        std::vector<std::string>{"launch", "--cpu", "--use_deepspeed", "--offload_param_device",
                                 "nvme", kProbe},
        std::vector<std::string>{"launch", "--cpu", "--use_deepspeed", "--zero_stage", "5", kProbe},
        std::vector<std::string>{"launch", "--cpu", "--use_fsdp", "--fsdp_auto_wrap_policy",
                                 "TRANSFORMER_BASED_WRAP", kProbe, "exit", "0"}}) {
    RunResult result = run_launcher(args, {{"SLURM_JOB_ID", std::nullopt}});
    EXPECT_EQ(result.exit_code, 2) << args[2];
    EXPECT_EQ(split_lines(result.err).size(), 1u) << result.err;
    EXPECT_EQ(result.err.rfind("accelerate launch: error: ", 0), 0u) << result.err;
    EXPECT_EQ(result.out, "");
  }
}

}  // namespace
}  // namespace accelerate::launcher

namespace accelerate::launcher {
namespace {

std::string cpu_refusal(const std::vector<std::string>& args,
                        const Environment& launcher_env = {}) {
  try {
    check_sharded_training(resolved(args), launcher_env, /*cpu_job=*/true);
  } catch (const UsageError& error) {
    return error.what();
  }
  return "(no error)";
}

// Hugging Face's own DeepSpeed templates switch fp16 on: on a CPU job each
// rank used to fail with a message that named neither the file nor the key.
TEST(LaunchSharding, Fp16OnACpuJobIsRefusedNamingWhatAskedForIt) {
  TemporaryFolder folder;
  const std::string path = write_deepspeed_json(folder, "true");
  EXPECT_EQ(
      cpu_refusal({"--use_deepspeed", "--deepspeed_config_file", path, "p"}),
      path +
          ": fp16.enabled true asks for fp16 mixed precision, which needs a CUDA device, but this "
          "job runs on the CPU (no GPU is visible on this machine); use bf16 there (set "
          "fp16.enabled to false or \"auto\")");
  EXPECT_EQ(cpu_refusal({"--cpu", "--mixed_precision", "fp16", "p"}),
            "--mixed_precision fp16 asks for fp16 mixed precision, which needs a CUDA device, but "
            "this job "
            "runs on the CPU (--cpu); use bf16 there");
  EXPECT_EQ(cpu_refusal({"p"}, {{"ACCELERATE_MIXED_PRECISION", "fp16"}})
                .rfind("ACCELERATE_MIXED_PRECISION=fp16 in the environment asks for fp16", 0),
            0u);
  // What can run passes: bf16, the file's "auto" without fp16, and fp16 on a GPU job.
  EXPECT_EQ(cpu_refusal({"--mixed_precision", "bf16", "p"}), "(no error)");
  EXPECT_EQ(cpu_refusal({"--use_deepspeed", "--deepspeed_config_file",
                         write_deepspeed_json(folder, "\"auto\""), "p"}),
            "(no error)");
  EXPECT_EQ(sharding_refusal({"--use_deepspeed", "--deepspeed_config_file", path, "p"}),
            "(no error)");
}

TEST(LaunchSharding, Fp16FromAConfigFileOnACpuJobStopsBeforeAnyProcessStarts) {
  TemporaryFolder folder;
  const std::string config = folder.path() + "/fp16.yaml";
  std::ofstream(config) << "mixed_precision: fp16\nnum_processes: 2\nuse_cpu: true\n";
  RunResult result = run_launcher({"launch", "--config_file", config, kProbe, "exit", "0"},
                                  {{"SLURM_JOB_ID", std::nullopt}});
  EXPECT_EQ(result.exit_code, 2);
  ASSERT_EQ(split_lines(result.err).size(), 1u) << result.err;
  // The key and line that asked for fp16, and the key and line that made it a CPU job.
  EXPECT_EQ(result.err,
            "accelerate launch: error: mixed_precision: fp16 (" + config +
                ":1) asks for fp16 mixed precision, which needs a CUDA device, but this job "
                "runs on the CPU (" +
                config + ":3: key 'use_cpu'); use bf16 there\n");
  EXPECT_EQ(result.out, "");
}

}  // namespace
}  // namespace accelerate::launcher

namespace accelerate::launcher {
namespace {

TEST(LaunchSharding, ADryRunShowsTheFp16RefusalAsANote) {
  TemporaryFolder folder;
  const std::string path = write_deepspeed_json(folder, "true");
  std::vector<std::string> notes;
  EXPECT_NO_THROW(
      notes = check_sharded_training(
          resolved({"--dry_run", "--use_deepspeed", "--deepspeed_config_file", path, "p"}), {},
          /*cpu_job=*/true));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].rfind(path + ": fp16.enabled true asks for fp16 mixed precision", 0), 0u)
      << notes[0];
  EXPECT_NE(notes[0].find("(a launch stops here)"), std::string::npos) << notes[0];
}

}  // namespace
}  // namespace accelerate::launcher
