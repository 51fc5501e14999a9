// `accelerate config` in a real terminal: tmux with a fixed size, keys sent
// with send-keys, the screen read with capture-pane. Skipped without tmux.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "config/config_test_files.h"
#include "support/process_runner.h"

namespace accelerate::config {
namespace {

using testing::run_program;
using testing::RunResult;
using testing::TemporaryFolder;

class Tmux {
 public:
  Tmux(const std::string& tmux, const std::string& command) : tmux_(tmux) {
    // One server per session: a new session on the socket of one that is
    // still shutting down fails ("server exited unexpectedly").
    static int sessions = 0;
    socket_ =
        "accelerate-config-test-" + std::to_string(::getpid()) + "-" + std::to_string(++sessions);
    RunResult started = run({"new-session", "-d", "-s", "q", "-x", "120", "-y", "50", command});
    ok_ = started.exit_code == 0;
    error_ = started.err;
  }
  ~Tmux() { run({"kill-server"}); }
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }

  void keys(const std::vector<std::string>& keys) {
    std::vector<std::string> args = {"send-keys", "-t", "q"};
    args.insert(args.end(), keys.begin(), keys.end());
    run(args);
  }
  std::string screen() { return run({"capture-pane", "-p", "-t", "q"}).out; }
  // Polls the screen until it shows `text` (at most 10 s).
  bool wait_for(const std::string& text) {
    for (int i = 0; i < 200; ++i) {
      if (screen().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

 private:
  RunResult run(std::vector<std::string> args) {
    args.insert(args.begin(), {tmux_, "-L", socket_, "-f", "/dev/null"});
    return run_program(args, {{"TERM", "xterm"}, {"TMUX", std::nullopt}});
  }
  std::string tmux_;
  std::string socket_;
  bool ok_ = false;
  std::string error_;
};

TEST(ConfigTerminal, ArrowKeysAndTypedAnswersWriteTheFile) {
  const std::string tmux = find_on_path("tmux");
  if (tmux.empty())
    GTEST_SKIP() << "tmux is not installed; the terminal questionnaire test needs it";
  TemporaryFolder folder;
  const std::string path = folder.path() + "/config.yaml";
  Tmux session(tmux, "stty -g > " + folder.path() + "/before; " + kCli + " config --config_file " +
                         path + "; echo EXIT=$?; stty -g > " + folder.path() + "/after; sleep 60");
  ASSERT_TRUE(session.ok()) << session.error();

  ASSERT_TRUE(session.wait_for("In which compute environment are you running?"))
      << session.screen();
  EXPECT_NE(session.screen().find(" > This machine"), std::string::npos) << session.screen();
  session.keys({"Enter"});
  ASSERT_TRUE(session.wait_for("Which type of machine are you using?")) << session.screen();
  session.keys({"Down", "Down"});
  ASSERT_TRUE(session.wait_for(" > multi-GPU")) << session.screen();
  session.keys({"Enter"});
  ASSERT_TRUE(session.wait_for("How many different machines")) << session.screen();
  session.keys({"1", "Enter"});
  ASSERT_TRUE(session.wait_for("Should distributed operations be checked")) << session.screen();
  session.keys({"yes", "Enter"});
  ASSERT_TRUE(session.wait_for("Do you want to use DeepSpeed?")) << session.screen();
  session.keys({"Enter"});
  ASSERT_TRUE(session.wait_for("Do you want to use FullyShardedDataParallel?")) << session.screen();
  session.keys({"Enter"});
  ASSERT_TRUE(session.wait_for("How many GPU(s) should be used")) << session.screen();
  session.keys({"2", "Enter"});
  ASSERT_TRUE(session.wait_for("What GPU(s) (by id)")) << session.screen();
  session.keys({"0,1", "Enter"});
  ASSERT_TRUE(session.wait_for("Do you wish to use mixed precision?")) << session.screen();
  session.keys({"Down", "Down", "Up"});  // bf16, then back up to fp16
  ASSERT_TRUE(session.wait_for(" > fp16")) << session.screen();
  session.keys({"Enter"});
  ASSERT_TRUE(session.wait_for("EXIT=0")) << session.screen();

  const std::string screen = session.screen();
  // Each menu is replaced by its answer once chosen.
  EXPECT_NE(screen.find("Which type of machine are you using?\n  multi-GPU\n"), std::string::npos)
      << screen;
  EXPECT_EQ(screen.find("No distributed training"), std::string::npos) << screen;
  EXPECT_EQ(read_file(path), kExpectedMultiGpu);
  ASSERT_TRUE(testing::wait_for_file(folder.path() + "/after", std::chrono::seconds(10)));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // stty finishes its line
  EXPECT_EQ(read_file(folder.path() + "/after"), read_file(folder.path() + "/before"));
}

TEST(ConfigTerminal, CtrlCInAMenuRestoresTheTerminal) {
  const std::string tmux = find_on_path("tmux");
  if (tmux.empty())
    GTEST_SKIP() << "tmux is not installed; the terminal questionnaire test needs it";
  TemporaryFolder folder;
  const std::string path = folder.path() + "/config.yaml";
  // The trap keeps the pane's shell alive after Ctrl-C (a shell without one
  // exits with its child), so it can report the exit code and the terminal.
  Tmux session(tmux, "trap 'echo trapped' INT; stty -g > " + folder.path() + "/before; " + kCli +
                         " config --config_file " + path + "; echo EXIT=$?; stty -g > " +
                         folder.path() + "/after; sleep 60");
  ASSERT_TRUE(session.ok()) << session.error();
  ASSERT_TRUE(session.wait_for(" > This machine")) << session.screen();
  session.keys({"C-c"});
  ASSERT_TRUE(session.wait_for("EXIT=130")) << session.screen();
  ASSERT_TRUE(testing::wait_for_file(folder.path() + "/after", std::chrono::seconds(10)));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // stty finishes its line
  EXPECT_EQ(read_file(folder.path() + "/after"),
            read_file(folder.path() + "/before"));  // echo and line mode back
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
}

}  // namespace
}  // namespace accelerate::config
