// End to end through the real `accelerate` executable: --max_restarts with a
// job that saves and resumes its progress, --log_dir files, --dry_run, and
// the one-line errors of checks made before anything starts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "launcher/launch_test_support.h"
#include "support/launcher_process.h"

namespace accelerate::launcher {
namespace {

using testing::run_launcher;
using testing::RunResult;
using testing::split_lines;
using testing::TemporaryFolder;

int count_lines_starting(const std::string& text, const std::string& start) {
  int count = 0;
  for (const auto& line : split_lines(text)) count += line.rfind(start, 0) == 0 ? 1 : 0;
  return count;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(LaunchRestarts, KilledRankRestartsTheGroupWhichResumesFromSavedProgress) {
  TemporaryFolder folder;
  // Rank 1 is SIGKILLed right after saving step 10 of 25, in the first attempt only.
  RunResult result = run_launcher(cpu_job(2, {"--max_restarts", "1", "--monitor_interval", "0.05"},
                                          {kProbe, "resume", folder.path(), "25", "1", "10"}),
                                  {}, std::chrono::seconds(20));
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_EQ(count_lines_starting(result.err, "accelerate launch: rank 1 (pid "), 1) << result.err;
  EXPECT_EQ(count_lines_starting(result.err,
                                 "accelerate launch: restarting the local processes (restart 1 of "
                                 "1, ACCELERATE_RESTART_COUNT=1)"),
            1)
      << result.err;
  EXPECT_EQ(count_lines_starting(result.out, "[rank0]: rank 0 attempt 0 starts at step 0"), 1)
      << result.out;
  EXPECT_EQ(count_lines_starting(result.out, "[rank1]: rank 1 attempt 1 starts at step 10"), 1)
      << result.out;
  // Rank 0 was stopped mid-run and resumes from wherever it had saved.
  EXPECT_EQ(count_lines_starting(result.out, "[rank0]: rank 0 attempt 1 starts at step 0"), 0)
      << result.out;
  EXPECT_EQ(count_lines_starting(result.out, "[rank0]: rank 0 attempt 1 starts at step "), 1)
      << result.out;
  EXPECT_EQ(count_lines_starting(result.out, "[rank0]: rank 0 finished"), 1);
  EXPECT_EQ(count_lines_starting(result.out, "[rank1]: rank 1 finished"), 1);
  EXPECT_EQ(read_file(folder.path() + "/progress1"), "25\n");
}

TEST(LaunchRestarts, WithoutRestartsTheFailureEndsTheJob) {
  TemporaryFolder folder;
  RunResult result =
      run_launcher(cpu_job(2, {}, {kProbe, "resume", folder.path(), "25", "1", "10"}), {},
                   std::chrono::seconds(20));
  EXPECT_EQ(result.exit_code, 128 + 9) << result.err;
  EXPECT_EQ(count_lines_starting(result.err, "accelerate launch: restarting"), 0) << result.err;
  EXPECT_EQ(read_file(folder.path() + "/progress1"), "10\n");
}

TEST(LaunchRestarts, RestartsRunOutAndTheLastCodeIsTheExitCode) {
  RunResult result =
      run_launcher(cpu_job(1, {"--max-restarts=2", "--monitor-interval=0"}, {kProbe, "exit", "3"}));
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_EQ(count_lines_starting(result.err, "accelerate launch: restarting the local processes"),
            2)
      << result.err;
  EXPECT_EQ(count_lines_starting(result.err,
                                 "accelerate launch: error: the job failed after 2 restart(s) "
                                 "(--max_restarts 2)"),
            1)
      << result.err;
}

TEST(LaunchLogDir, EachRankWritesItsOwnFilesWithoutThePrefix) {
  TemporaryFolder folder;
  const std::string logs = folder.path() + "/logs";
  RunResult result = run_launcher(cpu_job(2, {"--log_dir", logs}, {kProbe, "env", "RANK"}));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("[rank1]: RANK=1\n"), std::string::npos);  // the console is unchanged
  for (int rank = 0; rank < 2; ++rank) {
    const std::string folder_of_rank = logs + "/attempt_0/rank_" + std::to_string(rank) + "/";
    EXPECT_EQ(read_file(folder_of_rank + "stdout.log")
                  .rfind("RANK=" + std::to_string(rank) + "\nPID=", 0),
              0u);
    EXPECT_EQ(access((folder_of_rank + "stderr.log").c_str(), F_OK), 0);
  }
  RunResult stderr_only =
      run_launcher(cpu_job(1, {"--log_dir", logs, "--tee", "2"}, {kProbe, "exit", "0"}));
  ASSERT_EQ(stderr_only.exit_code, 0) << stderr_only.err;
}

TEST(LaunchDryRun, PrintsTheCommandsAndStartsNothing) {
  TemporaryFolder folder;
  RunResult result = run_launcher({"launch", "--dry-run", "--cpu", "--num_processes", "2",
                                   "--gpu_ids", "0", kProbe, "sleep", folder.path()});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.err, "");
  EXPECT_NE(result.out.find("  cpu = true (flag)\n"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("  main_process_port = "), std::string::npos);
  EXPECT_NE(result.out.find("  rank 0: env "), std::string::npos) << result.out;
  EXPECT_NE(result.out.find(" CUDA_VISIBLE_DEVICES=0 "), std::string::npos) << result.out;
  EXPECT_NE(result.out.find(" RANK=1 "), std::string::npos) << result.out;
  EXPECT_NE(result.out.find(" " + kProbe + " sleep " + folder.path() + "\n"), std::string::npos)
      << result.out;
  usleep(300 * 1000);  // a started rank would have written its pid file by now
  EXPECT_NE(access((folder.path() + "/rank0.pid").c_str(), F_OK), 0);
}

TEST(LaunchChecks, UnresolvableMainAddressIsOneLineBeforeAnythingStarts) {
  // ".invalid" never resolves (RFC 6761). Without a network the resolver
  // may wait for a server that never answers: one short try is enough.
  RunResult result =
      run_launcher({"launch", "--num_processes", "2", "--num_machines", "2", "--machine_rank", "1",
                    "--main_process_ip", "no-such-host.invalid", kProbe, "exit", "0"},
                   {{"RES_OPTIONS", "timeout:1 attempts:1"}}, std::chrono::seconds(30));
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(result.err.rfind(
                "accelerate launch: error: --main_process_ip 'no-such-host.invalid' cannot be "
                "resolved (",
                0),
            0u)
      << result.err;
  EXPECT_EQ(split_lines(result.err).size(), 1u);
}

}  // namespace
}  // namespace accelerate::launcher
