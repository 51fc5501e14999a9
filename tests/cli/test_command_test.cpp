// `accelerate test`: the real sanity program on real CPU processes through
// the launcher, with flags or a config file; and clear failures when the
// program is missing, fails, or the settings are bad.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "cli/cli_test_support.h"
#include "cli/test_command.h"

namespace accelerate::cli {
namespace {

using testing::run_accelerate;
using testing::RunResult;
using testing::TemporaryFolder;
using testing::write_file;

const char* const kSuccess = "Test is a success! You are ready for your distributed training!";
constexpr auto kJobTimeout = std::chrono::seconds(180);

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

void expect_success(const RunResult& result, int processes) {
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_NE(result.out.find(kSuccess), std::string::npos) << result.out;
  EXPECT_NE(result.out.find(std::to_string(processes) + " process(es)"), std::string::npos)
      << result.out;
  EXPECT_EQ(count(result.out, "[ok]"), 5u) << result.out;
  EXPECT_EQ(count(result.out, "[FAIL]"), 0u) << result.out;
}

// With HF_HOME an empty folder, no default config file of the machine's
// user can change what the test runs.
TEST(TestCommand, OneCpuProcessWithFlags) {
  TemporaryFolder home;
  expect_success(
      run_accelerate({"test", "--cpu", "--num_processes", "1", "--main_process_port", "0"},
                     {{"HF_HOME", home.path()}}, kJobTimeout),
      1);
}

TEST(TestCommand, TwoCpuProcessesWithFlags) {
  TemporaryFolder home;
  expect_success(
      run_accelerate({"test", "--cpu", "--num_processes", "2", "--main_process_port", "0"},
                     {{"HF_HOME", home.path()}}, kJobTimeout),
      2);
}

TEST(TestCommand, TwoCpuProcessesFromAConfigFile) {
  TemporaryFolder folder;
  const std::string config = folder.path() + "/two_cpus.yaml";
  write_file(config,
             "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nnum_machines: 1\n"
             "num_processes: 2\nuse_cpu: true\nmain_process_port: 0\n");
  expect_success(
      run_accelerate({"test", "--config_file", config}, {{"HF_HOME", folder.path()}}, kJobTimeout),
      2);
}

// A copy of `accelerate` in a folder of its own, with `sanity` (a script, or
// nothing) beside it as the sanity program.
std::string lone_accelerate(const TemporaryFolder& folder, const std::string& sanity) {
  const std::string copy = folder.path() + "/accelerate";
  std::ifstream in(ACCELERATE_CLI_PATH, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write_file(copy, bytes, true);
  if (!sanity.empty()) write_file(folder.path() + "/" + kSanityProgramName, sanity, true);
  return copy;
}

TEST(TestCommand, MissingSanityProgramFailsClearly) {
  TemporaryFolder folder;
  auto result = testing::run_program({lone_accelerate(folder, ""), "test", "--cpu"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("the sanity program accelerate-sanity-check was not found"),
            std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find(folder.path() + "/accelerate-sanity-check"), std::string::npos)
      << result.err;
  EXPECT_EQ(result.out.find(kSuccess), std::string::npos);
}

TEST(TestCommand, AFailingCheckFailsTheTest) {
  TemporaryFolder folder;
  const std::string accelerate =
      lone_accelerate(folder, "#!/bin/sh\necho '  [FAIL] all-reduce (sum, mean, max)'\nexit 1\n");
  auto result = testing::run_program(
      {accelerate, "test", "--cpu", "--num_processes", "1", "--main_process_port", "0"},
      {{"HF_HOME", folder.path()}});
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;
  EXPECT_NE(result.out.find("[FAIL] all-reduce"), std::string::npos) << result.out;
  EXPECT_NE(result.err.find("Test failed: the sanity program or its launch exited with code 1"),
            std::string::npos)
      << result.err;
  EXPECT_EQ(result.out.find(kSuccess), std::string::npos);
}

TEST(TestCommand, FindsTheInstalledLayout) {
  const auto candidates = sanity_program_candidates("/opt/acc/bin/accelerate");
  ASSERT_EQ(candidates.size(), 2u);
  EXPECT_EQ(candidates[0], "/opt/acc/bin/accelerate-sanity-check");
  EXPECT_EQ(candidates[1], "/opt/acc/bin/../libexec/accelerate/accelerate-sanity-check");
  // The build tree puts the real one beside `accelerate`.
  EXPECT_EQ(find_sanity_program(ACCELERATE_CLI_PATH), std::string(SANITY_PROGRAM_PATH));
}

TEST(TestCommand, RunsTheSanityProgramFromTheInstalledLibexecFolder) {
  TemporaryFolder prefix;
  ::mkdir((prefix.path() + "/bin").c_str(), 0755);
  ::mkdir((prefix.path() + "/libexec").c_str(), 0755);
  ::mkdir((prefix.path() + "/libexec/accelerate").c_str(), 0755);
  std::ifstream in(ACCELERATE_CLI_PATH, std::ios::binary);
  write_file(prefix.path() + "/bin/accelerate",
             std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()),
             true);
  write_file(prefix.path() + "/libexec/accelerate/" + kSanityProgramName,
             "#!/bin/sh\necho 'installed sanity program ran'\n", true);
  auto result = testing::run_program({prefix.path() + "/bin/accelerate", "test", "--cpu",
                                      "--num_processes", "1", "--main_process_port", "0"},
                                     {{"HF_HOME", prefix.path()}});
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("installed sanity program ran"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find(kSuccess), std::string::npos) << result.out;
}

TEST(TestCommand, BadSettingsAreUsageErrors) {
  auto stray = run_accelerate({"test", "train.py"});
  EXPECT_EQ(stray.exit_code, 2);
  EXPECT_NE(stray.err.find("unexpected argument 'train.py'"), std::string::npos) << stray.err;

  auto bad_flag = run_accelerate({"test", "--num_processes", "zero"});
  EXPECT_EQ(bad_flag.exit_code, 2);
  EXPECT_NE(bad_flag.err.find("--num_processes"), std::string::npos) << bad_flag.err;
  EXPECT_NE(bad_flag.err.find("Test failed: the launch settings were rejected"), std::string::npos)
      << bad_flag.err;
}

TEST(TestCommand, AMissingConfigFileIsAUsageError) {
  TemporaryFolder folder;
  auto missing = run_accelerate({"test", "--config_file", folder.path() + "/missing.yaml"});
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_NE(missing.err.find("missing.yaml"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace accelerate::cli
