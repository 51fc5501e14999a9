// A process killed with SIGKILL mid-run leaves readable files: every record
// that was flushed is complete, and nothing is torn.
#include <gtest/gtest.h>

#include <csignal>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

#include "accelerate/tracking/tracking.h"
#include "tracking_test_util.h"

namespace accelerate {
namespace {

using testing::split_lines;
using testing::TempDir;

// Runs tracking_log_child, waits for "ready" and kills it with SIGKILL.
void run_and_kill(const std::string& dir, const std::string& mode, int steps) {
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::close(out[0]);
    ::close(out[1]);
    const std::string count = std::to_string(steps);
    ::execl(TRACKING_LOG_CHILD, TRACKING_LOG_CHILD, dir.c_str(), mode.c_str(), count.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  std::string said;
  char c;
  while (said.find("ready\n") == std::string::npos && ::read(out[0], &c, 1) == 1) said += c;
  ::close(out[0]);
  ASSERT_EQ(said, "ready\n");
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

void expect_complete_files(const std::string& run_dir, int visible_steps) {
  // JSONL: config line + one line per visible step, each ending in "\n".
  const std::string jsonl = testing::read_text(run_dir + "/metrics.jsonl");
  ASSERT_FALSE(jsonl.empty());
  EXPECT_EQ(jsonl.back(), '\n');
  EXPECT_EQ(split_lines(jsonl).size(), static_cast<size_t>(visible_steps + 1));
  const std::string csv = testing::read_text(run_dir + "/metrics.csv");
  EXPECT_EQ(split_lines(csv).size(), static_cast<size_t>(visible_steps + 1));
  if (!tensorboard_available()) return;
  const auto files = testing::event_files(run_dir);
  ASSERT_EQ(files.size(), 1u);
  ACCELERATE_READ_EVENTS_OR_SKIP(result, files[0]);
  // file_version + hparams + one frame per visible step, nothing torn.
  EXPECT_EQ(result.output.rfind("frames " + std::to_string(visible_steps + 2) +
                                    "\npartial_tail_bytes 0\ncrc_errors 0\n",
                                0),
            0u)
      << result.output;
  const std::string last = "event " + std::to_string(visible_steps - 1) + " scalar loss " +
                           testing::float_bits(static_cast<float>((visible_steps - 1) * 0.5));
  EXPECT_NE(result.output.find(last + "\n"), std::string::npos) << result.output;
}

TEST(TrackingCrash, SigkillAfterFlushLeavesEveryFlushedRecord) {
  TempDir dir;
  run_and_kill(dir.path(), "flush", 10);
  expect_complete_files(dir.path() + "/crash", 10);  // the 10 unflushed are lost
}

TEST(TrackingCrash, SigkillWithWriteThroughLeavesEveryRecord) {
  TempDir dir;
  run_and_kill(dir.path(), "write_through", 10);
  expect_complete_files(dir.path() + "/crash", 20);
}

}  // namespace
}  // namespace accelerate
