// The config file through the real `accelerate` executable: precedence
// flag > config file > default as --dry_run lists it, the default file under
// $HF_HOME, --config_file, and the variables the ranks really get.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "launcher/launch_test_support.h"
#include "support/launcher_process.h"

namespace accelerate::launcher {
namespace {

using testing::run_launcher;
using testing::RunResult;
using testing::split_lines;
using testing::TemporaryFolder;

// A config file as Accelerate's users have it, on the CPU with 3 processes.
const char* kConfig =
    "compute_environment: LOCAL_MACHINE\n"
    "debug: false\n"
    "distributed_type: MULTI_CPU\n"
    "downcast_bf16: 'no'\n"
    "gpu_ids: all\n"
    "machine_rank: 0\n"
    "main_training_function: main\n"
    "mixed_precision: bf16\n"
    "num_machines: 1\n"
    "num_processes: 3\n"
    "rdzv_backend: static\n"
    "same_network: true\n"
    "use_cpu: true\n";

class LaunchConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(system(("mkdir -p " + folder_.path() + "/hf/accelerate").c_str()), 0);
    std::ofstream(default_file()) << kConfig;
  }
  std::string default_file() const { return folder_.path() + "/hf/accelerate/default_config.yaml"; }
  testing::ChildProcess::EnvironmentChanges env() const {
    return {{"HF_HOME", folder_.path() + "/hf"}, {"SLURM_JOB_ID", std::nullopt}};
  }
  bool listed(const RunResult& result, const std::string& line) const {
    for (const auto& l : split_lines(result.out)) {
      if (l == "  " + line) return true;
    }
    return false;
  }
  TemporaryFolder folder_;
};

TEST_F(LaunchConfigFile, FlagsWinOverTheDefaultFileWhichWinsOverDefaults) {
  RunResult result =
      run_launcher({"launch", "--dry_run", "--num_processes", "2", kProbe, "exit", "0"}, env());
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(listed(result, "config_file = " + default_file() + " (default)")) << result.out;
  EXPECT_TRUE(listed(result, "num_processes = 2 (flag)")) << result.out;
  EXPECT_TRUE(listed(result, "mixed_precision = bf16 (config file)"));
  EXPECT_TRUE(listed(result, "cpu = true (config file)"));
  EXPECT_TRUE(listed(result, "max_restarts = 0 (default)"));
  EXPECT_NE(result.out.find(" ACCELERATE_MIXED_PRECISION=bf16 "), std::string::npos);
}

TEST_F(LaunchConfigFile, APickedPortIsListedAsPickedNotAsTheFlag) {
  RunResult result =
      run_launcher({"launch", "--dry_run", "--main_process_port", "0", kProbe, "exit", "0"}, env());
  ASSERT_EQ(result.exit_code, 0) << result.err;
  bool found = false;
  for (const auto& line : split_lines(result.out)) {
    const std::string prefix = "  main_process_port = ";
    const std::string suffix = " (picked: a free port)";
    if (line.rfind(prefix, 0) != 0 || line.size() <= prefix.size() + suffix.size()) continue;
    const std::string port =
        line.substr(prefix.size(), line.size() - prefix.size() - suffix.size());
    found = line.compare(line.size() - suffix.size(), suffix.size(), suffix) == 0 &&
            port.find_first_not_of("0123456789") == std::string::npos && std::stoi(port) > 0;
  }
  EXPECT_TRUE(found) << result.out;
}

TEST_F(LaunchConfigFile, AnExplicitFileReplacesTheDefaultOne) {
  const std::string other = folder_.path() + "/other.yaml";
  std::ofstream(other)
      << "distributed_type: MULTI_CPU\nuse_cpu: true\nnum_processes: 2\nmixed_precision: fp16\n";
  RunResult result =
      run_launcher({"launch", "--dry-run", "--config-file", other, kProbe, "exit", "0"}, env());
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(listed(result, "config_file = " + other + " (flag)")) << result.out;
  EXPECT_TRUE(listed(result, "mixed_precision = fp16 (config file)")) << result.out;
  EXPECT_TRUE(listed(result, "num_processes = 2 (config file)"));

  RunResult missing = run_launcher(
      {"launch", "--config_file", folder_.path() + "/nope.yaml", kProbe, "exit", "0"}, env());
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_EQ(split_lines(missing.err).size(), 1u) << missing.err;
  EXPECT_NE(missing.err.find("nope.yaml"), std::string::npos) << missing.err;
}

TEST_F(LaunchConfigFile, AFileThatCannotBeUsedIsAUsageErrorOfOneLine) {
  const std::string bad = folder_.path() + "/bad.yaml";
  std::ofstream(bad) << "distributed_type: MULTI_CPU\nnum_process: 3\n";
  RunResult result = run_launcher({"launch", "--config_file", bad, kProbe, "exit", "0"}, env());
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(
      result.err,
      "accelerate launch: error: " + bad +
          ":2: unknown key 'num_process' (did you mean 'num_processes'?); see 'Config file' in "
          "docs/cli.md for the keys\n");
}

TEST_F(LaunchConfigFile, RanksRunWithTheFileSettings) {
  RunResult result =
      run_launcher({"launch", "-q", "--main_process_port", "0", kProbe, "env", "WORLD_SIZE",
                    "ACCELERATE_MIXED_PRECISION", "ACCELERATE_USE_CPU"},
                   env());
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string prefix = "[rank" + std::to_string(rank) + "]: ";
    EXPECT_NE(result.out.find(prefix + "WORLD_SIZE=3\n"), std::string::npos) << result.out;
    EXPECT_NE(result.out.find(prefix + "ACCELERATE_MIXED_PRECISION=bf16\n"), std::string::npos);
    EXPECT_NE(result.out.find(prefix + "ACCELERATE_USE_CPU=true\n"), std::string::npos);
  }
}

}  // namespace
}  // namespace accelerate::launcher
