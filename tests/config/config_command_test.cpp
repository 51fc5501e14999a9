// `accelerate config` end to end: the real executable, driven through a pipe,
// writing real files. The terminal (tmux) tests are in config_terminal_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "config/config_test_files.h"
#include "support/process_runner.h"

namespace accelerate::config {
namespace {

using testing::run_program;
using testing::RunResult;
using testing::TemporaryFolder;

RunResult shell(const std::string& command) { return run_program({"/bin/sh", "-c", command}); }

TEST(ConfigCommand, TypedAnswersOnAPipeWriteTheFile) {
  TemporaryFolder folder;
  const std::string path = folder.path() + "/sub/dir/config.yaml";
  RunResult result = shell("printf '" + std::string(kPipedAnswers) + "' | " + kCli +
                           " config --config_file " + path);
  ASSERT_EQ(result.exit_code, 0) << result.err << result.out;
  EXPECT_NE(
      result.out.find(
          "Which type of machine are you using?\n  [0] No distributed training\n  [1] multi-CPU\n"
          "  [2] multi-GPU\n"),
      std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("accelerate configuration saved at " + path), std::string::npos);
  EXPECT_EQ(read_file(path), kExpectedMultiGpu);
}

TEST(ConfigCommand, InputEndingEarlyFailsWithOneLineAndWritesNothing) {
  TemporaryFolder folder;
  const std::string path = folder.path() + "/config.yaml";
  RunResult result = shell("printf '0\\n2\\n' | " + kCli + " config --config_file " + path);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_EQ(result.err,
            "accelerate config: error: stdin ended before this question was answered: How many "
            "different machines will "
            "you use (use more than 1 for multi-node training)? [1]:\n");
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
}

TEST(ConfigCommand, WrittenFileReadsBackWithPyYamlExactly) {
  if (shell("/usr/bin/python3 -c 'import yaml' 2>/dev/null").exit_code != 0) {
    GTEST_SKIP() << "/usr/bin/python3 with PyYAML (python3-yaml) is not installed";
  }
  TemporaryFolder folder;
  const std::string path = folder.path() + "/config.yaml";
  ASSERT_EQ(shell("printf '" + std::string(kPipedAnswers) + "' | " + kCli +
                  " config --config_file " + path)
                .exit_code,
            0);
  // Accelerate loads with safe_load and writes with safe_dump: same text back.
  RunResult check =
      run_program({"/usr/bin/python3", "-c",
                   "import sys, yaml\n"
                   "text = open(sys.argv[1]).read()\n"
                   "data = yaml.safe_load(text)\n"
                   "assert data['distributed_type'] == 'MULTI_GPU' and data['num_processes'] == 2\n"
                   "assert data['downcast_bf16'] == 'no' and data['gpu_ids'] == '0,1'\n"
                   "sys.exit(0 if yaml.safe_dump(data) == text else 3)\n",
                   path});
  EXPECT_EQ(check.exit_code, 0) << check.err;
}

TEST(ConfigCommand, AJsonPathGetsJsonAsAccelerateWritesIt) {
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "/usr/bin/python3 is not installed";
  TemporaryFolder folder;
  const std::string path = folder.path() + "/config.json";
  ASSERT_EQ(shell("printf '" + std::string(kPipedAnswers) + "' | " + kCli +
                  " config --config_file " + path)
                .exit_code,
            0);
  // Accelerate reads a .json config with json.load and writes it with
  // json.dumps(indent=2, sort_keys=True) + newline.
  RunResult check = run_program(
      {"/usr/bin/python3", "-c",
       "import json, sys\n"
       "text = open(sys.argv[1]).read()\n"
       "data = json.loads(text)\n"
       "assert data['num_processes'] == 2 and data['gpu_ids'] == '0,1' and data['debug'] is True\n"
       "sys.exit(0 if json.dumps(data, indent=2, sort_keys=True) + '\\n' == text else 3)\n",
       path});
  EXPECT_EQ(check.exit_code, 0) << check.err;
}

TEST(ConfigCommand, DeepSpeedAnswersWriteAFileAccelerateAndOurLauncherRead) {
  TemporaryFolder folder;
  const std::string path = folder.path() + "/ds.yaml";
  // Multi-GPU, 1 machine, no debug, DeepSpeed without a JSON file, stage 1,
  // 2 accumulation steps, no clipping, no zero.Init, 2 GPUs, bf16.
  RunResult written =
      shell("printf '0\\n2\\n1\\nno\\nyes\\nno\\n1\\n2\\nno\\nno\\n2\\nbf16\\n' | " + kCli +
            " config --config_file " + path);
  ASSERT_EQ(written.exit_code, 0) << written.err << written.out;
  const std::string text = read_file(path);
  EXPECT_NE(
      text.find("deepspeed_config:\n  gradient_accumulation_steps: 2\n  zero3_init_flag: false\n"
                "  zero_stage: 1\ndistributed_type: DEEPSPEED\n"),
      std::string::npos)
      << text;
  if (shell("/usr/bin/python3 -c 'import yaml' 2>/dev/null").exit_code == 0) {
    RunResult check = run_program({"/usr/bin/python3", "-c",
                                   "import sys, yaml\n"
                                   "text = open(sys.argv[1]).read()\n"
                                   "data = yaml.safe_load(text)\n"
                                   "assert data['deepspeed_config']['zero_stage'] == 1\n"
                                   "sys.exit(0 if yaml.safe_dump(data) == text else 3)\n",
                                   path});
    EXPECT_EQ(check.exit_code, 0) << check.err;
  }
  RunResult launch =
      run_program({kCli, "launch", "--config_file", path, "--cpu", "--dry_run", "/bin/true"},
                  {{"SLURM_JOB_ID", std::nullopt}});
  ASSERT_EQ(launch.exit_code, 0) << launch.err;
  EXPECT_NE(launch.out.find("  use_deepspeed = true (config file)\n"), std::string::npos)
      << launch.out;
  EXPECT_NE(launch.out.find(" ACCELERATE_DEEPSPEED_ZERO_STAGE=1 "), std::string::npos)
      << launch.out;
  EXPECT_NE(launch.out.find(" ACCELERATE_GRADIENT_ACCUMULATION_STEPS=2 "), std::string::npos);
}

TEST(ConfigCommand, AccelerateDeepSpeedFileWithAJsonFileLaunches) {
  // The fixture names the JSON file relative to the repository's root, as
  // a relative path in a config file is read from the working directory.
  const std::string root = std::string(CONFIG_FIXTURES_DIR) + "/../../..";
  RunResult ok =
      shell("cd " + root + " && " + kCli + " launch --config_file " + CONFIG_FIXTURES_DIR +
            "/hf_deepspeed_config_file.yaml --cpu --dry_run /bin/true");
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(
      ok.out.find(
          " ACCELERATE_DEEPSPEED_CONFIG_FILE=tests/sharding/fixtures/zero_stage2_config.json "),
      std::string::npos)
      << ok.out;
  // The JSON's fp16 section refuses bf16 before anything starts.
  RunResult bf16 =
      shell("cd " + root + " && " + kCli + " launch --config_file " + CONFIG_FIXTURES_DIR +
            "/hf_deepspeed_config_file.yaml --cpu --mixed_precision bf16 /bin/true");
  EXPECT_EQ(bf16.exit_code, 2);
  EXPECT_EQ(bf16.err,
            "accelerate launch: error: tests/sharding/fixtures/zero_stage2_config.json: "
            "fp16.enabled is true but "
            "mixed_precision is bf16; Accelerate refuses the pair: set fp16.enabled to false or "
            "\"auto\", or "
            "mixed_precision to fp16\n");
}

TEST(ConfigCommand, DefaultWritesToHfHomeAndRefusesToOverwrite) {
  TemporaryFolder folder;
  const std::string path = folder.path() + "/accelerate/default_config.yaml";
  const testing::ChildProcess::EnvironmentChanges env = {{"HF_HOME", folder.path()},
                                                         {"CUDA_VISIBLE_DEVICES", ""}};
  RunResult first = run_program({kCli, "config", "default", "--mixed_precision", "bf16"}, env);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(first.out, "accelerate configuration saved at " + path + "\n");
  const std::string written = read_file(path);
  EXPECT_NE(written.find("mixed_precision: bf16\n"), std::string::npos) << written;
  EXPECT_NE(written.find("use_cpu: true\n"), std::string::npos) << written;  // no GPU visible

  // Hugging Face's exits 0 here, so setup scripts can run it again.
  RunResult second = run_program({kCli, "config", "default"}, env);
  EXPECT_EQ(second.exit_code, 0);
  EXPECT_EQ(second.err, "");
  EXPECT_EQ(
      second.out,
      "accelerate config: a config file already exists at " + path +
          "; not overwriting it (edit it with 'accelerate config', refresh it with 'accelerate "
          "config update', or pass another --config_file)\n");
  EXPECT_EQ(read_file(path), written);
}

TEST(ConfigCommand, UpdateKeepsValuesAndFillsCurrentKeys) {
  TemporaryFolder folder;
  const std::string path = folder.path() + "/old.yaml";
  std::ofstream(path)
      << "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nfp16: true\n"
         "num_processes: 3\nuse_cpu: true\nmain_process_port: 29999\n";
  RunResult result = run_program({kCli, "config", "update", "--config-file=" + path});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string text = read_file(path);
  for (const char* line :
       {"distributed_type: MULTI_CPU\n", "num_processes: 3\n", "main_process_port: 29999\n",
        "mixed_precision: fp16\n", "use_cpu: true\n", "debug: false\n", "tpu_env: []\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << " missing from\n" << text;
  }
  EXPECT_EQ(text.find("fp16: true"), std::string::npos) << text;
}

TEST(ConfigCommand, UpdateOfABadOrMissingFileFailsWithOneLine) {
  TemporaryFolder folder;
  const std::string path = folder.path() + "/bad.yaml";
  std::ofstream(path) << "distributed_type: MULTI_CPU\nnum_process: 3\n";
  RunResult bad = run_program({kCli, "config", "update", "--config_file", path});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(
      bad.err,
      "accelerate config: error: " + path +
          ":2: unknown key 'num_process' (did you mean 'num_processes'?); see 'Config file' in "
          "docs/cli.md for the keys\n");
  RunResult missing =
      run_program({kCli, "config", "update", "--config_file", folder.path() + "/none.yaml"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("no config file to update"), std::string::npos);
}

TEST(ConfigCommand, BadArgumentsAreUsageErrors) {
  RunResult result = run_program({kCli, "config", "--bogus"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(
      result.err,
      "accelerate config: error: unknown argument '--bogus'; see 'accelerate config --help'\n");
  RunResult precision = run_program({kCli, "config", "default", "--mixed_precision", "fp8"});
  EXPECT_EQ(precision.exit_code, 2);
  EXPECT_NE(precision.err.find("--mixed_precision expects one of no, bf16, fp16, got 'fp8'"),
            std::string::npos);
}

TEST(ConfigCommand, HelpIsListedAndPrinted) {
  RunResult top = run_program({kCli, "--help"});
  EXPECT_NE(top.out.find("  config "), std::string::npos) << top.out;
  RunResult help = run_program({kCli, "config", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find(
                "accelerate config default [--config_file PATH] [--mixed_precision no|fp16|bf16]"),
            std::string::npos)
      << help.out;
}

}  // namespace
}  // namespace accelerate::config
