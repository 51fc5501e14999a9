// Runs a real program (the `accelerate` executable, a probe) as a child of
// the test and captures what it prints, so end-to-end tests check exactly
// what a user would see.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace accelerate::testing {

struct RunResult {
  int exit_code = -1;      // 128+N when the launcher died of signal N
  bool timed_out = false;  // it was SIGKILLed by the test
  std::string out;
  std::string err;
  std::chrono::milliseconds elapsed{0};
};

// A running program; argv[0] is its path. Environment: the test's own, with
// `changes` applied (a nullopt value removes the variable).
class ChildProcess {
 public:
  using EnvironmentChanges = std::map<std::string, std::optional<std::string>>;

  explicit ChildProcess(const std::vector<std::string>& argv,
                        const EnvironmentChanges& changes = {});
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Collects output until the program exits; SIGKILLs it after `timeout`.
  RunResult wait(std::chrono::milliseconds timeout = std::chrono::seconds(10));

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  bool waited_ = false;
  std::chrono::steady_clock::time_point started_;
};

// Starts a program and waits for it.
RunResult run_program(const std::vector<std::string>& argv,
                      const ChildProcess::EnvironmentChanges& changes = {},
                      std::chrono::milliseconds timeout = std::chrono::seconds(10));

// Splits text into lines (without their newlines).
std::vector<std::string> split_lines(const std::string& text);

// Waits until `path` exists, at most `timeout`.
bool wait_for_file(const std::string& path, std::chrono::milliseconds timeout);
// The pid written by launch_probe into `path`, or -1.
pid_t read_pid_file(const std::string& path);
// True once `pid` no longer exists (kill(pid, 0) fails with ESRCH, so a
// zombie still counts as there), polling up to `timeout`.
bool wait_until_gone(pid_t pid, std::chrono::milliseconds timeout);

// A TCP port free a moment ago: below the ephemeral range when possible
// (common/free_port.h), else bind to 0, read, close.
int free_loopback_port();

// A fresh temporary folder, removed with the object.
class TemporaryFolder {
 public:
  TemporaryFolder();
  ~TemporaryFolder();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace accelerate::testing
