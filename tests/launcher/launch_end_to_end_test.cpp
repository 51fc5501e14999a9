// End to end, when all goes well: the real `accelerate` executable starts
// real launch_probe processes, and the tests read what they print. Failures,
// signals and start-up errors are in launch_failure_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <regex>
#include <set>

#include "launcher/launch_test_support.h"
#include "support/launcher_process.h"

namespace accelerate::launcher {
namespace {

using testing::free_loopback_port;
using testing::run_launcher;
using testing::RunResult;
using testing::split_lines;

// Values printed by `launch_probe env`, per prefixed rank: "[rank1]: RANK=1".
std::string value_for(const std::string& out, const std::string& prefix, const std::string& key) {
  for (const auto& line : split_lines(out)) {
    if (line.rfind(prefix + key + "=", 0) == 0) return line.substr(prefix.size() + key.size() + 1);
  }
  return "(missing)";
}

TEST(LaunchEndToEnd, CpuWithTwoProcessesReallyStartsTwoRanks) {
  const int port = free_loopback_port();
  RunResult result =
      run_launcher({"launch", "--cpu", "--num_processes", "2", "--main_process_port",
                    std::to_string(port), "-q", kProbe, "env", "RANK", "LOCAL_RANK", "WORLD_SIZE",
                    "MASTER_ADDR", "MASTER_PORT", "ACCELERATE_USE_CPU"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.err, "");  // -q: no launcher lines
  std::set<std::string> pids;
  for (int rank = 0; rank < 2; ++rank) {
    std::string prefix = "[rank" + std::to_string(rank) + "]: ";
    EXPECT_EQ(value_for(result.out, prefix, "RANK"), std::to_string(rank));
    EXPECT_EQ(value_for(result.out, prefix, "LOCAL_RANK"), std::to_string(rank));
    EXPECT_EQ(value_for(result.out, prefix, "WORLD_SIZE"), "2");
    EXPECT_EQ(value_for(result.out, prefix, "MASTER_ADDR"), "127.0.0.1");
    EXPECT_EQ(value_for(result.out, prefix, "MASTER_PORT"), std::to_string(port));
    EXPECT_EQ(value_for(result.out, prefix, "ACCELERATE_USE_CPU"), "true");
    pids.insert(value_for(result.out, prefix, "PID"));
  }
  EXPECT_EQ(pids.size(), 2u) << result.out;
  EXPECT_EQ(pids.count("(missing)"), 0u);
}

TEST(LaunchEndToEnd, ThreeRanksEachPrefixTheirOwnLines) {
  RunResult result =
      run_launcher(cpu_job(3, {kProbe, "env", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"}));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (int rank = 0; rank < 3; ++rank) {
    std::string prefix = "[rank" + std::to_string(rank) + "]: ";
    EXPECT_EQ(value_for(result.out, prefix, "RANK"), std::to_string(rank)) << result.out;
    EXPECT_EQ(value_for(result.out, prefix, "WORLD_SIZE"), "3");
    EXPECT_EQ(value_for(result.out, prefix, "LOCAL_WORLD_SIZE"), "3");
  }
  EXPECT_EQ(split_lines(result.out).size(), 12u);  // 3 variables + PID, 3 ranks
}

TEST(LaunchEndToEnd, ManyLinesArriveWholeAndOnTheRightStream) {
  const int count = 3000;
  RunResult result = run_launcher(cpu_job(3, {kProbe, "lines", std::to_string(count)}));
  ASSERT_EQ(result.exit_code, 0) << result.err.substr(0, 500);
  const std::regex out_line(R"(\[rank(\d)\]: rank (\d) line (\d+) x{100} end)");
  const std::regex err_line(R"(\[rank(\d)\]: rank (\d) err (\d+))");
  int out_seen[3] = {0, 0, 0};
  int err_seen[3] = {0, 0, 0};
  for (const auto& line : split_lines(result.out)) {
    std::smatch match;
    ASSERT_TRUE(std::regex_match(line, match, out_line)) << "broken stdout line: " << line;
    ASSERT_EQ(match[1], match[2]);
    int rank = std::stoi(match[1]);
    EXPECT_EQ(std::stoi(match[3]), out_seen[rank]++);  // in order within a rank
  }
  for (const auto& line : split_lines(result.err)) {
    std::smatch match;
    ASSERT_TRUE(std::regex_match(line, match, err_line)) << "broken stderr line: " << line;
    ASSERT_EQ(match[1], match[2]);
    int rank = std::stoi(match[1]);
    EXPECT_EQ(std::stoi(match[3]), err_seen[rank]++);
  }
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(out_seen[rank], count);
    EXPECT_EQ(err_seen[rank], count);
  }
}

TEST(LaunchEndToEnd, OneProcessHasNoPrefixAndAFinalPartialLineIsFlushed) {
  RunResult single = run_launcher(cpu_job(1, {kProbe, "partial", "no newline"}));
  ASSERT_EQ(single.exit_code, 0) << single.err;
  EXPECT_EQ(single.out, "no newline\n");

  RunResult two = run_launcher(cpu_job(2, {kProbe, "partial", "tail"}));
  ASSERT_EQ(two.exit_code, 0) << two.err;
  auto lines = split_lines(two.out);
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"[rank0]: tail", "[rank1]: tail"}));
}

TEST(LaunchEndToEnd, ProgramArgumentsPassThroughUntouched) {
  RunResult result =
      run_launcher(cpu_job(1, {kProbe, "args", "--num_processes", "9", "-q", "--", "a b"}));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "--num_processes\n9\n-q\n--\na b\n");
}

TEST(LaunchEndToEnd, LauncherFlagsReachTheRanksAsVariables) {
  RunResult result = run_launcher(
      {"launch", "--cpu", "--num-processes=2", "--main_process_port=0", "-q",
       "--mixed_precision=bf16", "--debug", "--gradient_accumulation_steps", "4",
       "--num_cpu_threads_per_process", "1", kProbe, "env", "ACCELERATE_MIXED_PRECISION",
       "ACCELERATE_DEBUG_MODE", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "OMP_NUM_THREADS",
       "OPENBLAS_NUM_THREADS", "MASTER_PORT"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (const std::string prefix : {"[rank0]: ", "[rank1]: "}) {
    EXPECT_EQ(value_for(result.out, prefix, "ACCELERATE_MIXED_PRECISION"), "bf16");
    EXPECT_EQ(value_for(result.out, prefix, "ACCELERATE_DEBUG_MODE"), "true");
    EXPECT_EQ(value_for(result.out, prefix, "ACCELERATE_GRADIENT_ACCUMULATION_STEPS"), "4");
    EXPECT_EQ(value_for(result.out, prefix, "OMP_NUM_THREADS"), "1");
    EXPECT_EQ(value_for(result.out, prefix, "OPENBLAS_NUM_THREADS"), "1");
  }
  // Port 0: one free port picked by the launcher, the same for every rank.
  std::string port = value_for(result.out, "[rank0]: ", "MASTER_PORT");
  EXPECT_GT(std::stoi(port), 0);
  EXPECT_EQ(value_for(result.out, "[rank1]: ", "MASTER_PORT"), port);
}

TEST(LaunchEndToEnd, UserThreadSettingIsKept) {
  RunResult result =
      run_launcher(cpu_job(2, {kProbe, "env", "OMP_NUM_THREADS"}), {{"OMP_NUM_THREADS", "5"}});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(value_for(result.out, "[rank1]: ", "OMP_NUM_THREADS"), "5");
}

TEST(LaunchEndToEnd, InformationalLineUnlessQuiet) {
  RunResult result = run_launcher(
      {"launch", "--cpu", "--num_processes", "2", "--main_process_port", "0", kProbe, "exit", "0"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  // One start line, after the notes of this machine (OPENBLAS_CORETYPE on a
  // CPU its OpenBLAS does not know, docs/launching.md).
  const auto lines = split_lines(result.err);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(
      lines.back().rfind("accelerate launch: starting 2 process(es), ranks 0-1 of 2 on cpu", 0), 0u)
      << result.err;
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    EXPECT_EQ(lines[i].rfind("accelerate launch: note: ", 0), 0u) << lines[i];
  }
}

// Settings asking for GPUs run on the CPU of a machine without any, and say so.
TEST(LaunchEndToEnd, GpuSettingsOnAMachineWithoutGpusAreNoted) {
  const testing::ChildProcess::EnvironmentChanges no_gpus = {{"CUDA_VISIBLE_DEVICES", ""}};
  RunResult result = run_launcher({"launch", "--gpu_ids", "0", "--use_deepspeed", "--zero_stage",
                                   "2", "--main_process_port", "0", kProbe, "exit", "0"},
                                  no_gpus);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.err.find("accelerate launch: note: --gpu_ids 0: no GPU is visible on this "
                            "machine; the processes run on the CPU\n"),
            std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find("accelerate launch: note: DeepSpeed without --cpu (use_cpu: false): "
                            "no GPU is visible on this machine; ZeRO runs on the CPU over Gloo\n"),
            std::string::npos)
      << result.err;
  // Asked for the CPU: nothing to note.
  RunResult cpu = run_launcher({"launch", "--cpu", "--use_deepspeed", "--zero_stage", "2",
                                "--main_process_port", "0", kProbe, "exit", "0"},
                               no_gpus);
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  EXPECT_EQ(cpu.err.find("no GPU is visible"), std::string::npos) << cpu.err;
}

}  // namespace
}  // namespace accelerate::launcher
