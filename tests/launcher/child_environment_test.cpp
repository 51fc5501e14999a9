// The ranks' environment, output reassembly and program lookup: pure
// functions (and the file system), checked without starting a launcher.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "launcher/child_environment.h"
#include "launcher/launch_errors.h"
#include "launcher/launch_test_support.h"
#include "launcher/output_relay.h"
#include "launcher/program_resolution.h"
#include "support/launcher_process.h"

namespace accelerate::launcher {
namespace {

TEST(LaunchChildEnvironment, TwoRanksGetTorchrunVariables) {
  LaunchOptions options =
      resolved({"--cpu", "--num_processes", "2", "--main_process_port", "29601", "p"});
  Environment parent = {{"HOME", "/home/me"}, {"RANK", "stale"}};
  for (int local_rank = 0; local_rank < 2; ++local_rank) {
    Environment env = build_child_environment(options, local_rank, parent, 8);
    EXPECT_EQ(env.at("HOME"), "/home/me");  // the launcher's environment is passed on
    EXPECT_EQ(env.at("RANK"), std::to_string(local_rank));
    EXPECT_EQ(env.at("LOCAL_RANK"), std::to_string(local_rank));
    EXPECT_EQ(env.at("WORLD_SIZE"), "2");
    EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "2");
    EXPECT_EQ(env.at("GROUP_RANK"), "0");
    EXPECT_EQ(env.at("ROLE_RANK"), std::to_string(local_rank));
    EXPECT_EQ(env.at("ROLE_WORLD_SIZE"), "2");
    EXPECT_EQ(env.at("MASTER_ADDR"), "127.0.0.1");
    EXPECT_EQ(env.at("MASTER_PORT"), "29601");
    EXPECT_EQ(env.at("TORCHELASTIC_RESTART_COUNT"), "0");
    EXPECT_EQ(env.at("ACCELERATE_USE_CPU"), "true");
    EXPECT_EQ(env.at("OMP_NUM_THREADS"), "4");
    EXPECT_EQ(env.at("OPENBLAS_NUM_THREADS"), "1");
    EXPECT_EQ(env.at("OMP_WAIT_POLICY"), "PASSIVE");
    EXPECT_EQ(env.count("ACCELERATE_MIXED_PRECISION"), 0u);
    EXPECT_EQ(env.count("ACCELERATE_DEBUG_MODE"), 0u);
    EXPECT_EQ(env.count("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"), 0u);
  }
}

TEST(LaunchChildEnvironment, ThreeRanksOnTheSecondMachine) {
  // --num_processes counts the whole job: 6 over 2 machines is 3 here.
  LaunchOptions options = resolved({"--num_processes", "6", "--num_machines", "2", "--machine_rank",
                                    "1", "--main_process_ip", "10.1.2.3", "p"});
  const char* expected_ranks[] = {"3", "4", "5"};
  for (int local_rank = 0; local_rank < 3; ++local_rank) {
    Environment env = build_child_environment(options, local_rank, {}, 2);
    EXPECT_EQ(env.at("RANK"), expected_ranks[local_rank]);
    EXPECT_EQ(env.at("ROLE_RANK"), expected_ranks[local_rank]);
    EXPECT_EQ(env.at("LOCAL_RANK"), std::to_string(local_rank));
    EXPECT_EQ(env.at("WORLD_SIZE"), "6");
    EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "3");
    EXPECT_EQ(env.at("GROUP_RANK"), "1");
    EXPECT_EQ(env.at("GROUP_WORLD_SIZE"), "2");
    EXPECT_EQ(env.at("MASTER_ADDR"), "10.1.2.3");
    EXPECT_EQ(env.at("MASTER_PORT"), "29500");
    EXPECT_EQ(env.count("ACCELERATE_USE_CPU"), 0u);
    EXPECT_EQ(env.at("OMP_NUM_THREADS"), "1");  // 2 cores / 3 ranks, at least 1
  }
}

TEST(LaunchChildEnvironment, ThreadShareDividesTheCores) {
  EXPECT_EQ(default_threads_per_process(16, 4), 4);
  EXPECT_EQ(default_threads_per_process(7, 2), 3);
  EXPECT_EQ(default_threads_per_process(2, 3), 1);
  EXPECT_EQ(default_threads_per_process(1, 1), 1);
}

TEST(LaunchChildEnvironment, UserThreadSettingsAreKeptUnlessTheFlagIsGiven) {
  Environment parent = {{"OMP_NUM_THREADS", "7"}};
  Environment kept = build_child_environment(resolved({"--num_processes", "2", "p"}), 0, parent, 8);
  EXPECT_EQ(kept.at("OMP_NUM_THREADS"), "7");
  EXPECT_EQ(kept.at("OPENBLAS_NUM_THREADS"),
            "1");  // not set by the user: OpenBLAS's pool stays at 1

  parent["OPENBLAS_NUM_THREADS"] = "2";
  kept = build_child_environment(resolved({"--num_processes", "2", "p"}), 0, parent, 8);
  EXPECT_EQ(kept.at("OPENBLAS_NUM_THREADS"), "2");

  // The flag decides both, whatever the shell says.
  Environment flag = build_child_environment(
      resolved({"--num_processes", "2", "--num_cpu_threads_per_process", "3", "p"}), 1, parent, 8);
  EXPECT_EQ(flag.at("OMP_NUM_THREADS"), "3");
  EXPECT_EQ(flag.at("OPENBLAS_NUM_THREADS"), "1");
}

// Two pools of spinning threads on the same cores made training slower than
// one thread (docs/performance.md, "Threads on LibTorch 1.13 and 2.6"):
// OpenMP's idle threads sleep, unless the user chose a policy.
TEST(LaunchChildEnvironment, OpenMpThreadsWaitPassivelyUnlessTheUserChose) {
  for (const char* flags : {"", "--num_cpu_threads_per_process"}) {
    std::vector<std::string> args = {"--num_processes", "1"};
    if (*flags) args.insert(args.end(), {flags, "2"});
    args.push_back("p");
    EXPECT_EQ(build_child_environment(resolved(args), 0, {}, 2).at("OMP_WAIT_POLICY"), "PASSIVE")
        << flags;
    EXPECT_EQ(build_child_environment(resolved(args), 0, {{"OMP_WAIT_POLICY", "active"}}, 2)
                  .at("OMP_WAIT_POLICY"),
              "active")
        << flags;
  }
  // One process on 2 cores: 2 OpenMP threads, 1 OpenBLAS thread.
  Environment env = build_child_environment(resolved({"--num_processes", "1", "p"}), 0, {}, 2);
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "2");
  EXPECT_EQ(env.at("OPENBLAS_NUM_THREADS"), "1");
}

// OpenBLAS's idle workers (where the user gives it more than one thread)
// sleep after 2^4 cycles instead of spinning ~0.1 s through LibTorch's
// parallel regions, unless the user chose a timeout.
TEST(LaunchChildEnvironment, OpenblasWorkersSleepSoonUnlessTheUserChose) {
  const LaunchOptions options = resolved({"--num_processes", "1", "p"});
  EXPECT_EQ(build_child_environment(options, 0, {}, 2).at("OPENBLAS_THREAD_TIMEOUT"), "4");
  EXPECT_EQ(build_child_environment(options, 0, {{"OPENBLAS_NUM_THREADS", "2"}}, 2)
                .at("OPENBLAS_THREAD_TIMEOUT"),
            "4");
  EXPECT_EQ(build_child_environment(options, 0, {{"OPENBLAS_THREAD_TIMEOUT", "28"}}, 2)
                .at("OPENBLAS_THREAD_TIMEOUT"),
            "28");
}

// The machine's faster OpenBLAS core reaches every rank, unless the user
// exported one (which wins, as for the thread variables).
TEST(LaunchChildEnvironment, OpenblasCoreTypeUnlessTheUserChose) {
  const LaunchOptions options = resolved({"--num_processes", "2", "p"});
  for (int local_rank = 0; local_rank < 2; ++local_rank) {
    EXPECT_EQ(build_child_environment(options, local_rank, {}, 2, 0, std::string("Cooperlake"))
                  .at("OPENBLAS_CORETYPE"),
              "Cooperlake");
  }
  EXPECT_EQ(build_child_environment(options, 0, {{"OPENBLAS_CORETYPE", "haswell"}}, 2, 0,
                                    std::string("Cooperlake"))
                .at("OPENBLAS_CORETYPE"),
            "haswell");
  EXPECT_EQ(build_child_environment(options, 0, {}, 2).count("OPENBLAS_CORETYPE"), 0u);
}

TEST(LaunchChildEnvironment, FlagsBecomeAccelerateVariables) {
  LaunchOptions options =
      resolved({"--mixed_precision", "fp16", "--gradient_accumulation_steps", "4", "--debug", "p"});
  Environment env =
      build_child_environment(options, 0, {{"ACCELERATE_MIXED_PRECISION", "bf16"}}, 4);
  EXPECT_EQ(env.at("ACCELERATE_MIXED_PRECISION"), "fp16");  // the flag beats the shell
  EXPECT_EQ(env.at("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"), "4");
  EXPECT_EQ(env.at("ACCELERATE_DEBUG_MODE"), "true");

  // Without flags, values exported in the shell reach the program unchanged.
  Environment inherited =
      build_child_environment(resolved({"p"}), 0, {{"ACCELERATE_MIXED_PRECISION", "bf16"}}, 4);
  EXPECT_EQ(inherited.at("ACCELERATE_MIXED_PRECISION"), "bf16");
}

TEST(LaunchChildEnvironment, PythonProgramsAreUnbuffered) {
  EXPECT_EQ(build_child_environment(resolved({"train.py"}), 0, {}, 4).at("PYTHONUNBUFFERED"), "1");
  EXPECT_EQ(build_child_environment(resolved({"-m", "pkg"}), 0, {}, 4).at("PYTHONUNBUFFERED"), "1");
  EXPECT_EQ(build_child_environment(resolved({"./train"}), 0, {}, 4).count("PYTHONUNBUFFERED"), 0u);
  EXPECT_EQ(build_child_environment(resolved({"--no_python", "x.py"}), 0, {}, 4)
                .count("PYTHONUNBUFFERED"),
            0u);
}

TEST(LaunchChildEnvironment, EnvpStringsAreKeyEqualsValue) {
  EXPECT_EQ(to_envp_strings({{"A", "1"}, {"B", "x=y"}}),
            (std::vector<std::string>{"A=1", "B=x=y"}));
}

TEST(LaunchOutputRelay, CompleteLinesGetThePrefixAndPartialOnesWait) {
  std::string pending = "one\ntw";
  EXPECT_EQ(take_complete_lines(pending, "[rank1]: ", false), "[rank1]: one\n");
  EXPECT_EQ(pending, "tw");
  pending += "o\nthree";
  EXPECT_EQ(take_complete_lines(pending, "[rank1]: ", false), "[rank1]: two\n");
  EXPECT_EQ(take_complete_lines(pending, "[rank1]: ", true), "[rank1]: three\n");
  EXPECT_EQ(pending, "");
  pending = "\n\n";
  EXPECT_EQ(take_complete_lines(pending, "", false), "\n\n");
}

TEST(LaunchOutputRelay, OverlongLinesArePassedOnInPieces) {
  std::string pending(kMaxBufferedLine + 10, 'a');
  std::string out = take_complete_lines(pending, "> ", false);
  EXPECT_EQ(out, "> " + std::string(kMaxBufferedLine, 'a') + "\n");
  EXPECT_EQ(pending.size(), 10u);
}

class LaunchProgramResolution : public ::testing::Test {
 protected:
  std::string write_file(const std::string& name, mode_t mode) {
    std::string path = folder_.path() + "/" + name;
    std::ofstream(path) << "#!/bin/sh\n";
    chmod(path.c_str(), mode);
    return path;
  }
  static std::string failure_of(const LaunchOptions& options, const Environment& env) {
    try {
      resolve_command(options, env);
    } catch (const std::exception& failure) {
      return failure.what();
    }
    return "(no error)";
  }
  testing::TemporaryFolder folder_;
};

TEST_F(LaunchProgramResolution, BareNamesAreLookedUpOnPath) {
  std::string tool = write_file("my-tool", 0755);
  write_file("not-runnable", 0644);
  Environment env = {{"PATH", "/nonexistent:" + folder_.path()}};
  LaunchOptions options = parse_launch_arguments({"my-tool", "a", "b"}).options;
  ResolvedCommand command = resolve_command(options, env);
  EXPECT_EQ(command.executable, tool);
  EXPECT_EQ(command.argv, (std::vector<std::string>{"my-tool", "a", "b"}));
  EXPECT_EQ(find_on_path("not-runnable", folder_.path()), std::nullopt);
  EXPECT_EQ(failure_of(parse_launch_arguments({"no-such-tool-xyz"}).options, env),
            "program 'no-such-tool-xyz' not found (not a file and not on PATH)");
}

TEST_F(LaunchProgramResolution, PathsMustBeExecutableFiles) {
  std::string plain = write_file("plain", 0644);
  Environment env = {{"PATH", "/usr/bin:/bin"}};
  EXPECT_EQ(
      failure_of(parse_launch_arguments({plain}).options, env),
      "program '" + plain + "' is not executable (chmod +x it, or put its interpreter first)");
  EXPECT_EQ(failure_of(parse_launch_arguments({folder_.path() + "/missing"}).options, env),
            "program '" + folder_.path() + "/missing' not found (no such file)");
  EXPECT_EQ(failure_of(parse_launch_arguments({folder_.path()}).options, env),
            "program '" + folder_.path() + "' is a directory, not a program");
}

TEST_F(LaunchProgramResolution, PythonScriptsAndModulesRunWithPython3) {
  std::string python = write_file("python3", 0755);
  std::string script = write_file("train.py", 0644);  // scripts need not be executable
  Environment env = {{"PATH", folder_.path()}};
  ResolvedCommand command =
      resolve_command(parse_launch_arguments({script, "--lr", "1"}).options, env);
  EXPECT_EQ(command.executable, python);
  EXPECT_EQ(command.argv, (std::vector<std::string>{"python3", script, "--lr", "1"}));

  command = resolve_command(parse_launch_arguments({"-m", "pkg.train", "x"}).options, env);
  EXPECT_EQ(command.argv, (std::vector<std::string>{"python3", "-m", "pkg.train", "x"}));

  EXPECT_EQ(
      failure_of(parse_launch_arguments({"--no_python", script}).options, env),
      "program '" + script + "' is not executable (chmod +x it, or put its interpreter first)");
  EXPECT_EQ(failure_of(parse_launch_arguments({script}).options, {{"PATH", "/nonexistent"}}),
            "python3 not found on PATH; it is needed to run the Python script '" + script +
                "' (install Python, or pass --no_python to run the file as a program)");
  EXPECT_EQ(failure_of(parse_launch_arguments({folder_.path() + "/gone.py"}).options, env),
            "Python script '" + folder_.path() + "/gone.py' not found (no such file)");
}

}  // namespace
}  // namespace accelerate::launcher
