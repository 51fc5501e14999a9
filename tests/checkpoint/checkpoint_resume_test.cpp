// Real processes (checkpoint_probe, one or two meeting through a TCPStore):
// train, stop after a save, resume and finish gives bitwise the parameters of
// an uninterrupted run (shuffling, dropout, Adam, StepLR, accumulation), on 1
// and 2 processes; and a process SIGKILLed at any stage of a save leaves the
// previous checkpoint intact, the incomplete one ignored, and a resumed run
// that still ends bitwise equal.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <regex>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/process_runner.h"

namespace accelerate::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

const std::string kProbe = CHECKPOINT_PROBE_PATH;

// Runs the probe as `processes` real processes meeting through a TCPStore,
// with the variables torchrun would set (no launcher: a killed rank's peers
// must give up on their own, within ACCELERATE_TIMEOUT). Returns every
// rank's output, concatenated, and the worst exit code.
RunResult run_probe(int processes, const std::vector<std::string>& args,
                    const ChildProcess::EnvironmentChanges& extra = {}) {
  std::vector<std::string> argv = {kProbe};
  argv.insert(argv.end(), args.begin(), args.end());
  const int port = free_loopback_port();
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int rank = 0; rank < processes; ++rank) {
    ChildProcess::EnvironmentChanges env = {
        {"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}, {"ACCELERATE_TIMEOUT", "5"}};
    if (processes > 1) {
      env["RANK"] = env["LOCAL_RANK"] = std::to_string(rank);
      env["WORLD_SIZE"] = env["LOCAL_WORLD_SIZE"] = std::to_string(processes);
      env["MASTER_ADDR"] = "127.0.0.1";
      env["MASTER_PORT"] = std::to_string(port);
    }
    for (const auto& [key, value] : extra) env[key] = value;
    ranks.push_back(std::make_unique<ChildProcess>(argv, env));
  }
  RunResult all;
  all.exit_code = 0;
  for (auto& rank : ranks) {
    RunResult one = rank->wait(120s);
    all.out += one.out;
    all.err += one.err;
    if (one.exit_code != 0) all.exit_code = one.exit_code;
  }
  return all;
}

// "final digest ..." of rank 0.
std::string final_digest(const RunResult& result) {
  std::smatch match;
  static const std::regex pattern("rank 0: final digest ([0-9a-f]+) after ([0-9]+)");
  if (!std::regex_search(result.out, match, pattern)) return "(none)\n" + result.out + result.err;
  return match[1].str() + " after " + match[2].str();
}

std::string resumed_from(const RunResult& result) {
  std::smatch match;
  static const std::regex pattern("resumed from (\\S+) at step ([0-9]+)");
  if (!std::regex_search(result.out, match, pattern)) return "(none)";
  return fs::path(match[1].str()).filename().string() + " at step " + match[2].str();
}

class CheckpointExactResume : public ::testing::TestWithParam<int> {};

TEST_P(CheckpointExactResume, StopAfterASaveThenResumeEndsBitwiseEqual) {
  const int n = GetParam();
  TemporaryFolder tmp;
  auto reference = run_probe(n, {tmp.path() + "/reference"});
  ASSERT_EQ(reference.exit_code, 0) << reference.out << reference.err;
  const std::string expected = final_digest(reference);
  ASSERT_THAT(expected, HasSubstr(n == 1 ? "after 24" : "after 12"));

  // Mid-epoch (step 3: batch 6 of 16, or 6 of 8), then an epoch's end
  // (step 8 on one process, 4 on two).
  const std::vector<std::pair<std::string, std::string>> stops = {
      {"3", "3"}, {n == 1 ? "8" : "4", n == 1 ? "4" : "2"}};
  int run = 0;
  for (const auto& [stop, every] : stops) {
    const std::string project = tmp.path() + "/run" + std::to_string(run++);
    auto first = run_probe(n, {project, "--stop_after", stop, "--save_every", every});
    ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
    auto second = run_probe(n, {project, "--resume", "--save_every", every});
    ASSERT_EQ(second.exit_code, 0) << second.out << second.err;
    EXPECT_THAT(resumed_from(second), HasSubstr("at step " + stop));
    EXPECT_EQ(final_digest(second), expected) << "stopped after step " << stop;
  }
}

INSTANTIATE_TEST_SUITE_P(Processes, CheckpointExactResume, ::testing::Values(1, 2));

struct KillPoint {
  std::string stage;
  int rank;
  std::string resumes_from;  // the checkpoint a resumed run must pick
};

void PrintTo(const KillPoint& point, std::ostream* out) {
  *out << point.stage << " on rank " << point.rank;
}

class CheckpointKilledSave : public ::testing::TestWithParam<KillPoint> {};

// The uninterrupted two-process run's digest, computed once.
const std::string& two_process_reference() {
  static const std::string digest = [] {
    TemporaryFolder tmp;
    return final_digest(run_probe(2, {tmp.path() + "/reference"}));
  }();
  return digest;
}

// Saves at steps 3, 6, 9, 12 (checkpoint_0 .. _3, two kept); the save at
// step 9 (checkpoint_2) is killed.
TEST_P(CheckpointKilledSave, LeavesThePreviousCheckpointAndResumesBitwiseEqual) {
  const KillPoint& point = GetParam();
  ASSERT_THAT(two_process_reference(), HasSubstr("after 12"));
  TemporaryFolder tmp;
  const std::string project = tmp.path() + "/killed";
  auto killed = run_probe(2, {project},
                          {{"CHECKPOINT_PROBE_KILL_AT", point.stage},
                           {"CHECKPOINT_PROBE_KILL_RANK", std::to_string(point.rank)},
                           {"CHECKPOINT_PROBE_KILL_STEP", "9"}});
  ASSERT_NE(killed.exit_code, 0) << killed.out << killed.err;
  ASSERT_THAT(killed.err, HasSubstr("killing itself at " + point.stage));
  EXPECT_THAT(final_digest(killed), HasSubstr("(none)"));  // it really died mid-run

  auto resumed = run_probe(2, {project, "--resume"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_EQ(resumed_from(resumed), point.resumes_from);
  EXPECT_EQ(final_digest(resumed), two_process_reference());
  // No staging or half-deleted folder survives the next saves.
  for (const auto& entry : fs::directory_iterator(project + "/checkpoints")) {
    EXPECT_EQ(entry.path().filename().string().rfind("checkpoint_", 0), 0u) << entry.path();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Stages, CheckpointKilledSave,
    ::testing::Values(KillPoint{"staged", 1, "checkpoint_1 at step 6"},
                      KillPoint{"custom", 0, "checkpoint_1 at step 6"},
                      KillPoint{"files_written", 0, "checkpoint_1 at step 6"},
                      // Its files are all written: the main process completes it.
                      KillPoint{"files_written", 1, "checkpoint_2 at step 9"},
                      KillPoint{"metadata_written", 0, "checkpoint_1 at step 6"},
                      KillPoint{"renamed", 0, "checkpoint_2 at step 9"},
                      KillPoint{"pruned", 0, "checkpoint_2 at step 9"}),
    [](const ::testing::TestParamInfo<KillPoint>& info) {
      return info.param.stage + "_rank" + std::to_string(info.param.rank);
    });

// The same under ZeRO stage 3, set as `accelerate launch --use_deepspeed
// --zero_stage 3` sets it: each process writes its own optimizer shard and
// the model file is written from gathered weights. A save killed after a
// process wrote its files leaves the previous checkpoint (or, when the
// main process lives, completes), and the resumed run ends bitwise where the
// uninterrupted stage-3 run ends.
TEST(CheckpointKilledSaveZero3, LeavesThePreviousCheckpointAndResumesBitwiseEqual) {
  const ChildProcess::EnvironmentChanges zero3 = {{"ACCELERATE_USE_DEEPSPEED", "true"},
                                                  {"ACCELERATE_DEEPSPEED_ZERO_STAGE", "3"}};
  TemporaryFolder tmp;
  const std::string expected = final_digest(run_probe(2, {tmp.path() + "/reference"}, zero3));
  ASSERT_THAT(expected, HasSubstr("after 12"));
  EXPECT_NE(expected, two_process_reference()) << "stage 3 clips at 1.0 (DeepSpeed's default)";
  for (const KillPoint& point : {KillPoint{"files_written", 0, "checkpoint_1 at step 6"},
                                 KillPoint{"files_written", 1, "checkpoint_2 at step 9"}}) {
    SCOPED_TRACE(point.stage + " on rank " + std::to_string(point.rank));
    const std::string project = tmp.path() + "/killed_rank" + std::to_string(point.rank);
    ChildProcess::EnvironmentChanges kill = zero3;
    kill["CHECKPOINT_PROBE_KILL_AT"] = point.stage;
    kill["CHECKPOINT_PROBE_KILL_RANK"] = std::to_string(point.rank);
    kill["CHECKPOINT_PROBE_KILL_STEP"] = "9";
    auto killed = run_probe(2, {project}, kill);
    ASSERT_NE(killed.exit_code, 0) << killed.out << killed.err;
    ASSERT_THAT(killed.err, HasSubstr("killing itself at " + point.stage));
    EXPECT_THAT(final_digest(killed), HasSubstr("(none)"));
    auto resumed = run_probe(2, {project, "--resume"}, zero3);
    ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
    EXPECT_EQ(resumed_from(resumed), point.resumes_from);
    EXPECT_EQ(final_digest(resumed), expected);
  }
}

}  // namespace
}  // namespace accelerate::testing
