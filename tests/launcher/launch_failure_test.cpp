// End to end: what happens when a rank fails, when the launcher is told to
// stop, and when the job cannot start. "Gone" means kill(pid, 0) fails with
// ESRCH: the process was stopped and reaped, not left as a zombie.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "common/shared_memory_names.h"
#include "launcher/launch_test_support.h"
#include "launcher/program_resolution.h"
#include "support/launcher_process.h"

namespace accelerate::launcher {
namespace {

using namespace std::chrono_literals;
using testing::LauncherProcess;
using testing::read_pid_file;
using testing::run_launcher;
using testing::RunResult;
using testing::split_lines;
using testing::TemporaryFolder;
using testing::wait_for_file;
using testing::wait_until_gone;

std::string rank_pid_file(const TemporaryFolder& folder, int rank) {
  return folder.path() + "/rank" + std::to_string(rank) + ".pid";
}

// stderr must be exactly one line, starting with `start`.
void expect_one_error_line(const RunResult& result, const std::string& start) {
  auto lines = split_lines(result.err);
  ASSERT_EQ(lines.size(), 1u) << result.err;
  EXPECT_EQ(lines[0].rfind(start, 0), 0u) << lines[0];
}

TEST(LaunchFailure, FailingRankStopsTheOthersAndItsCodeIsTheExitCode) {
  TemporaryFolder folder;
  RunResult result = run_launcher(cpu_job(2, {kProbe, "fail-on-rank", "1", "3", folder.path()}));
  EXPECT_EQ(result.exit_code, 3);
  auto lines = split_lines(result.err);
  ASSERT_EQ(lines.size(), 1u) << result.err;
  EXPECT_EQ(lines[0].rfind("accelerate launch: rank 1 (pid ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(") failed with exit code 3; stopped the other 1 rank(s)"),
            std::string::npos)
      << lines[0];
  // The sleeping rank 0 was stopped by SIGTERM, well before its 30 s sleep
  // and before the grace period would have escalated to SIGKILL.
  pid_t sleeper = read_pid_file(rank_pid_file(folder, 0));
  ASSERT_GT(sleeper, 0);
  EXPECT_TRUE(wait_until_gone(sleeper, 1s));
  EXPECT_LT(result.elapsed, 2s);  // SIGTERM works at once; no grace period used
  // So was the process rank 0 had started: the whole process group is
  // signalled, and the launcher (a subreaper) reaps it too.
  pid_t child = read_pid_file(folder.path() + "/child0.pid");
  ASSERT_GT(child, 0);
  EXPECT_TRUE(wait_until_gone(child, 1s));
}

// A rank killed while one of its shared memory segments is still named
// (the library removes names as soon as its peers mapped them) would leave
// the name, and its memory, in /dev/shm: the launcher removes it.
TEST(LaunchFailure, SharedMemoryNamesOfKilledRanksAreRemoved) {
  TemporaryFolder folder;
  RunResult result = run_launcher(cpu_job(2, {kProbe, "leave-shm", folder.path()}));
  EXPECT_EQ(result.exit_code, 128 + 9) << result.err;
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = read_pid_file(rank_pid_file(folder, rank));
    if (pid <= 0) continue;  // stopped before it started (the other rank was killed first)
    EXPECT_EQ(accelerate::shared_memory_names_of(pid), std::vector<std::string>{})
        << "rank " << rank;
  }
  // At least the first rank to die got that far.
  EXPECT_GT(
      std::max(read_pid_file(rank_pid_file(folder, 0)), read_pid_file(rank_pid_file(folder, 1))),
      0);
}

TEST(LaunchFailure, RankKilledBySignalIsNamed) {
  TemporaryFolder folder;
  RunResult result = run_launcher(cpu_job(2, {kProbe, "signal-on-rank", "0", "9", folder.path()}));
  EXPECT_EQ(result.exit_code, 128 + 9);
  auto lines = split_lines(result.err);
  ASSERT_EQ(lines.size(), 1u) << result.err;
  EXPECT_NE(lines[0].find("rank 0 (pid "), std::string::npos);
  EXPECT_NE(lines[0].find(") was killed by signal 9 (SIGKILL); stopped the other 1 rank(s)"),
            std::string::npos)
      << lines[0];
  EXPECT_TRUE(wait_until_gone(read_pid_file(rank_pid_file(folder, 1)), 1s));
}

TEST(LaunchFailure, SingleProcessExitCodePropagates) {
  RunResult result = run_launcher(cpu_job(1, {kProbe, "exit", "7"}));
  EXPECT_EQ(result.exit_code, 7);
  expect_one_error_line(result, "accelerate launch: rank 0 (pid ");
  EXPECT_NE(result.err.find("failed with exit code 7\n"), std::string::npos) << result.err;
}

TEST(LaunchSignals, SigtermStopsEveryRankAndExitsWith143) {
  TemporaryFolder folder;
  LauncherProcess launcher(cpu_job(3, {kProbe, "sleep", folder.path()}));
  std::vector<pid_t> ranks;
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_TRUE(wait_for_file(rank_pid_file(folder, rank), 5s))
        << "rank " << rank << " never started";
    ranks.push_back(read_pid_file(rank_pid_file(folder, rank)));
  }
  kill(launcher.pid(), SIGTERM);
  RunResult result = launcher.wait(8s);
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.exit_code, 143);
  EXPECT_LT(result.elapsed, 5s);  // the ranks obey SIGTERM: no grace period needed
  for (pid_t pid : ranks)
    EXPECT_TRUE(wait_until_gone(pid, 1s)) << "rank pid " << pid << " survived";
}

TEST(LaunchSignals, SigintIsForwardedAndGivesExitCode130) {
  TemporaryFolder folder;
  LauncherProcess launcher(cpu_job(2, {kProbe, "sleep", folder.path()}));
  ASSERT_TRUE(wait_for_file(rank_pid_file(folder, 0), 5s));
  ASSERT_TRUE(wait_for_file(rank_pid_file(folder, 1), 5s));
  pid_t rank1 = read_pid_file(rank_pid_file(folder, 1));
  kill(launcher.pid(), SIGINT);
  RunResult result = launcher.wait(8s);
  EXPECT_EQ(result.exit_code, 130);
  EXPECT_TRUE(wait_until_gone(rank1, 1s));
}

// The one slow test: a rank that ignores SIGTERM is SIGKILLed after the 5 s
// grace period, and not much later.
TEST(LaunchSignals, RankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  TemporaryFolder folder;
  LauncherProcess launcher(cpu_job(1, {kProbe, "sleep-ignoring-term", folder.path()}));
  ASSERT_TRUE(wait_for_file(rank_pid_file(folder, 0), 5s));
  pid_t rank0 = read_pid_file(rank_pid_file(folder, 0));
  auto sent = std::chrono::steady_clock::now();
  kill(launcher.pid(), SIGTERM);
  RunResult result = launcher.wait(9s);
  auto took = std::chrono::steady_clock::now() - sent;
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.exit_code, 143);
  EXPECT_GE(took, 4900ms);
  EXPECT_LT(took, 7s);
  EXPECT_TRUE(wait_until_gone(rank0, 1s));
}

TEST(LaunchSignals, SecondSignalKillsAtOnce) {
  TemporaryFolder folder;
  LauncherProcess launcher(cpu_job(2, {kProbe, "sleep-ignoring-term", folder.path()}));
  ASSERT_TRUE(wait_for_file(rank_pid_file(folder, 0), 5s));
  ASSERT_TRUE(wait_for_file(rank_pid_file(folder, 1), 5s));
  auto sent = std::chrono::steady_clock::now();
  kill(launcher.pid(), SIGTERM);
  std::this_thread::sleep_for(100ms);
  kill(launcher.pid(), SIGTERM);  // out of patience: no grace period
  RunResult result = launcher.wait(9s);
  EXPECT_EQ(result.exit_code, 143);
  EXPECT_LT(std::chrono::steady_clock::now() - sent, 2s);
  EXPECT_TRUE(wait_until_gone(read_pid_file(rank_pid_file(folder, 0)), 1s));
  EXPECT_TRUE(wait_until_gone(read_pid_file(rank_pid_file(folder, 1)), 1s));
}

// A SIGKILLed launcher cannot clean up; PR_SET_PDEATHSIG kills the ranks.
// The test becomes a subreaper so the orphaned ranks come to it and can be
// reaped here (an init that never reaps would keep them as zombies).
TEST(LaunchSignals, RanksDieWithASigkilledLauncher) {
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  TemporaryFolder folder;
  LauncherProcess launcher(cpu_job(2, {kProbe, "sleep", folder.path()}));
  ASSERT_TRUE(wait_for_file(rank_pid_file(folder, 0), 5s));
  ASSERT_TRUE(wait_for_file(rank_pid_file(folder, 1), 5s));
  std::vector<pid_t> ranks = {read_pid_file(rank_pid_file(folder, 0)),
                              read_pid_file(rank_pid_file(folder, 1))};
  kill(launcher.pid(), SIGKILL);
  EXPECT_EQ(launcher.wait(5s).exit_code, 128 + SIGKILL);
  for (pid_t rank : ranks) {
    int status = 0;
    // Blocks only until the rank dies; a survivor would hang here, so bound it.
    auto deadline = std::chrono::steady_clock::now() + 3s;
    pid_t reaped = 0;
    while (reaped == 0 && std::chrono::steady_clock::now() < deadline) {
      reaped = waitpid(rank, &status, WNOHANG);
      if (reaped == 0) std::this_thread::sleep_for(10ms);
    }
    EXPECT_EQ(reaped, rank) << "rank pid " << rank << " survived its launcher";
    if (reaped == rank) {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    } else {
      kill(rank, SIGKILL);
    }
  }
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST(LaunchErrors, MissingProgramIsOneLineBeforeAnythingStarts) {
  RunResult result = run_launcher({"launch", "--cpu", "no_such_program_for_accelerate_test"});
  EXPECT_EQ(result.exit_code, 2);  // bad input, as a bad flag
  EXPECT_EQ(
      result.err,
      "accelerate launch: error: program 'no_such_program_for_accelerate_test' not found (not a "
      "file and not on PATH)\n");
  EXPECT_EQ(result.out, "");
}

TEST(LaunchErrors, NonExecutableProgramIsOneLine) {
  TemporaryFolder folder;
  std::string path = folder.path() + "/script";
  std::ofstream(path) << "#!/bin/sh\necho hi\n";
  chmod(path.c_str(), 0644);
  RunResult result = run_launcher({"launch", "--cpu", path});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(result.err, "accelerate launch: error: program '" + path +
                            "' is not executable (chmod +x it, or put its interpreter first)\n");
}

TEST(LaunchErrors, PortInUseIsNamedBeforeAnyRankStarts) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  socklen_t length = sizeof(address);
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  const std::string port = std::to_string(ntohs(address.sin_port));

  RunResult result = run_launcher({"launch", "--cpu", "--num_processes", "2", "--main_process_port",
                                   port, kProbe, "env", "RANK"});
  close(listener);
  EXPECT_EQ(result.exit_code, 1);
  expect_one_error_line(result, "accelerate launch: error: port " + port + " is already in use");
  EXPECT_NE(result.err.find("--main_process_port"), std::string::npos);
  EXPECT_EQ(result.out, "");  // no rank ran
}

TEST(LaunchErrors, UsageErrorsExitWith2) {
  RunResult unknown = run_launcher({"launch", "--num_proceses", "2", kProbe});
  EXPECT_EQ(unknown.exit_code, 2);
  expect_one_error_line(unknown,
                        "accelerate launch: error: unknown flag '--num_proceses'; did you mean "
                        "--num_processes?");
  RunResult bad_value = run_launcher({"launch", "--num_processes", "0", kProbe});
  EXPECT_EQ(bad_value.exit_code, 2);
  expect_one_error_line(
      bad_value,
      "accelerate launch: error: --num_processes expects a whole number from 1 to 1000000");
  RunResult subcommand = run_launcher({"lunch"});
  EXPECT_EQ(subcommand.exit_code, 2);
  expect_one_error_line(subcommand, "accelerate: error: unknown command 'lunch'");
  RunResult nothing = run_launcher({});
  EXPECT_EQ(nothing.exit_code, 2);
}

TEST(LaunchErrors, HelpAndVersion) {
  RunResult version = run_launcher({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out, "accelerate-cpp 0.1.0\n");
  RunResult help = run_launcher({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("launch"), std::string::npos);
  RunResult launch_help = run_launcher({"launch", "--help"});
  EXPECT_EQ(launch_help.exit_code, 0);
  EXPECT_NE(launch_help.out.find("--num_processes N"), std::string::npos);
  EXPECT_NE(launch_help.out.find("--main_process_port P"), std::string::npos);
  // As git's: `accelerate help launch` is `accelerate launch --help`.
  RunResult help_launch = run_launcher({"help", "launch"});
  EXPECT_EQ(help_launch.exit_code, 0);
  EXPECT_EQ(help_launch.out, launch_help.out);
  RunResult help_unknown = run_launcher({"help", "lunch"});
  EXPECT_EQ(help_unknown.exit_code, 2);
  expect_one_error_line(help_unknown, "accelerate: error: no help for 'lunch': not a command");
}

TEST(LaunchPython, PyScriptRunsWithPython3) {
  if (!find_on_path("python3", lookup(current_environment(), "PATH"))) {
    GTEST_SKIP() << "python3 is not on PATH";
  }
  TemporaryFolder folder;
  std::string script = folder.path() + "/print_rank.py";
  std::ofstream(script)
      << "import os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n";
  RunResult result = run_launcher(cpu_job(2, {script}));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  auto lines = split_lines(result.out);
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"[rank0]: rank 0 of 2", "[rank1]: rank 1 of 2"}));
}

TEST(LaunchPython, ModuleRunsWithPython3DashM) {
  if (!find_on_path("python3", lookup(current_environment(), "PATH"))) {
    GTEST_SKIP() << "python3 is not on PATH";
  }
  TemporaryFolder folder;
  std::ofstream(folder.path() + "/rank_module.py")
      << "import os, sys\nprint(os.environ['LOCAL_RANK'], os.environ['PYTHONUNBUFFERED'], "
         "sys.argv[1:])\n";
  RunResult result = run_launcher(cpu_job(1, {"-m", "rank_module", "--flag", "x"}),
                                  {{"PYTHONPATH", folder.path()}});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "0 1 ['--flag', 'x']\n");
}

}  // namespace
}  // namespace accelerate::launcher
