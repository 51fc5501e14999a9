// What one attempt starts (launch_plan.h): per-rank commands and log files,
// the --dry_run report, and the mpirun command of --mpirun_hostfile. Pure
// functions plus a temporary folder; nothing is started.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "launcher/launch_errors.h"
#include "launcher/launch_plan.h"
#include "launcher/launch_test_support.h"
#include "support/process_runner.h"

namespace accelerate::launcher {
namespace {

PlanInputs inputs_for(const LaunchOptions& options) {
  PlanInputs inputs;
  inputs.options = &options;
  inputs.program = ResolvedCommand{"/opt/train", {"/opt/train", "--lr", "0.1"}};
  inputs.environment = {{"HOME", "/home/me"}, {"RANK", "stale"}};
  inputs.usable_cores = 4;
  return inputs;
}

bool has(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

TEST(LaunchPlan, OneCommandPerLocalRankWithLogFilesPerAttempt) {
  LaunchOptions options =
      resolved({"--num_processes", "4", "--num_machines", "2", "--machine_rank", "1",
                "--main_process_ip", "10.0.0.1", "--log_dir", "/logs", "--tee", "1", "p"});
  SupervisorSettings settings = plan_attempt(inputs_for(options), 2);
  ASSERT_EQ(settings.ranks.size(), 2u);
  EXPECT_TRUE(settings.prefix_output);
  EXPECT_EQ(settings.command.executable, "/opt/train");
  EXPECT_EQ(settings.ranks[1].global_rank, 3);
  EXPECT_TRUE(has(settings.ranks[1].environment, "RANK=3"));
  EXPECT_TRUE(has(settings.ranks[1].environment, "ACCELERATE_RESTART_COUNT=2"));
  EXPECT_EQ(settings.ranks[1].stdout_log, "/logs/attempt_2/rank_3/stdout.log");
  EXPECT_EQ(settings.ranks[1].stderr_log, "");  // --tee 1: stdout only
}

TEST(LaunchPlan, LogFoldersAreCreated) {
  testing::TemporaryFolder folder;
  LaunchOptions options =
      resolved({"--num_processes", "2", "--log_dir", folder.path() + "/a/b", "p"});
  SupervisorSettings settings = plan_attempt(inputs_for(options), 0);
  EXPECT_EQ(settings.ranks[0].stderr_log, folder.path() + "/a/b/attempt_0/rank_0/stderr.log");
  prepare_log_folders(settings);
  EXPECT_TRUE(std::ofstream(settings.ranks[1].stdout_log).good());

  std::ofstream(folder.path() + "/file") << "x";
  LaunchOptions blocked = resolved({"--log_dir", folder.path() + "/file", "p"});
  EXPECT_THROW(prepare_log_folders(plan_attempt(inputs_for(blocked), 0)), LaunchFailure);
}

TEST(LaunchPlan, DryRunListsSourcesAndShellReadyCommands) {
  LaunchOptions options = resolved({"--num_processes", "2", "--debug", "p"});
  PlanInputs inputs = inputs_for(options);
  inputs.program.argv = {"/opt/train", "it's", "a b"};
  std::string report =
      describe_plan(options, {"a note"}, plan_attempt(inputs, 0), inputs.environment);
  EXPECT_NE(report.find("  num_processes = 2 (flag)\n"), std::string::npos) << report;
  EXPECT_NE(report.find("  num_machines = 1 (default)\n"), std::string::npos);
  EXPECT_NE(report.find("note: a note\n"), std::string::npos);
  // Only what differs from the launcher's environment; argv quoted for a shell.
  EXPECT_NE(report.find("  rank 1: env ACCELERATE_DEBUG_MODE=true ACCELERATE_RESTART_COUNT=0 "),
            std::string::npos)
      << report;
  EXPECT_NE(report.find(" RANK=1 "), std::string::npos);
  EXPECT_EQ(report.find("HOME="), std::string::npos);
  EXPECT_NE(report.find(" /opt/train 'it'\\''s' 'a b'\n"), std::string::npos) << report;
  EXPECT_EQ(shell_quote("plain-1.0/x=y"), "plain-1.0/x=y");
  EXPECT_EQ(shell_quote(""), "''");
}

TEST(LaunchMpirun, HostfileGivesFirstHostAndSlots) {
  testing::TemporaryFolder folder;
  const std::string path = folder.path() + "/hosts";
  std::ofstream(path) << "# cluster\n\nnode1 slots=2\nnode2   # one slot\n";
  Hostfile hostfile = read_hostfile(path);
  EXPECT_EQ(hostfile.first_host, "node1");
  EXPECT_EQ(hostfile.slots, 3);
  std::ofstream(folder.path() + "/empty") << "# nothing\n";
  EXPECT_THROW(read_hostfile(folder.path() + "/empty"), LaunchFailure);
  EXPECT_THROW(read_hostfile(folder.path() + "/missing"), UsageError);  // bad input: exit 2
}

TEST(LaunchMpirun, OneMpirunCarriesTheSettingsButNoTopology) {
  LaunchOptions options = resolved({"--cpu", "--num_processes", "4", "--mpirun_hostfile", "hosts",
                                    "--main_process_port", "29999", "p"});
  PlanInputs inputs = inputs_for(options);
  inputs.mpirun_path = "/usr/bin/mpirun";
  inputs.hostfile = Hostfile{"node1", 2};
  inputs.as_root = true;
  SupervisorSettings settings = plan_attempt(inputs, 0);
  ASSERT_EQ(settings.ranks.size(), 1u);
  EXPECT_EQ(settings.ranks[0].name, "mpirun");
  EXPECT_FALSE(settings.prefix_output);
  const auto& argv = settings.command.argv;
  EXPECT_EQ(settings.command.executable, "/usr/bin/mpirun");
  EXPECT_EQ(std::vector<std::string>(argv.begin(), argv.begin() + 5),
            (std::vector<std::string>{"mpirun", "--hostfile", "hosts", "-np", "4"}));
  EXPECT_TRUE(has(argv, "--allow-run-as-root"));
  EXPECT_TRUE(has(argv, "--oversubscribe"));  // 4 processes, 2 slots
  for (const char* exported :
       {"MASTER_ADDR", "MASTER_PORT", "ACCELERATE_USE_CPU", "OMP_NUM_THREADS"}) {
    auto it = std::find(argv.begin(), argv.end(), exported);
    ASSERT_NE(it, argv.end()) << exported;
    EXPECT_EQ(*(it - 1), "-x");
  }
  EXPECT_EQ(std::vector<std::string>(argv.end() - 3, argv.end()),
            (std::vector<std::string>{"/opt/train", "--lr", "0.1"}));
  const auto& env = settings.ranks[0].environment;
  EXPECT_TRUE(has(env, "MASTER_ADDR=node1"));  // where mpirun puts rank 0
  EXPECT_TRUE(has(env, "MASTER_PORT=29999"));
  for (const auto& entry : env) {
    // RANK & co. would hide OMPI_COMM_WORLD_* from every rank.
    EXPECT_NE(entry.rfind("RANK=", 0), 0u) << entry;
    EXPECT_NE(entry.rfind("WORLD_SIZE=", 0), 0u) << entry;
    EXPECT_NE(entry.rfind("LOCAL_RANK=", 0), 0u) << entry;
  }

  inputs.as_root = false;
  inputs.hostfile.slots = 8;
  SupervisorSettings fits = plan_attempt(inputs, 0);
  EXPECT_FALSE(has(fits.command.argv, "--allow-run-as-root"));
  EXPECT_FALSE(has(fits.command.argv, "--oversubscribe"));
}

}  // namespace
}  // namespace accelerate::launcher
