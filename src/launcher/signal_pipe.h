// The self-pipe trick: signal handlers only write the signal number into a
// pipe, and the supervisor's poll() loop reads it like any other input. All
// real work then happens outside signal context, and a signal that arrives
// just before poll() still wakes it.
#pragma once

#include <csignal>
#include <vector>

namespace accelerate::launcher {

// The signals the launcher handles: a child ended, or it was asked to stop.
constexpr int kHandledSignals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};

class SignalPipe {
 public:
  // Creates the pipe, installs the handlers, and ignores SIGPIPE (a closed
  // stdout must not kill the launcher while ranks still run). One instance
  // at a time; throws LaunchFailure if the pipe cannot be made.
  SignalPipe();
  // Restores the previous dispositions and closes the pipe.
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  int read_fd() const { return read_fd_; }
  // Signal numbers received since the last call, in arrival order.
  std::vector<int> take_signals();

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
  struct sigaction previous_[sizeof(kHandledSignals) / sizeof(int)] = {};
  struct sigaction previous_sigpipe_ = {};
};

// Run in a freshly forked child before exec: back to default dispositions
// for everything the launcher changed, and the given signal mask.
// Async-signal-safe.
void reset_signals_in_child(const sigset_t& mask);

// "SIGTERM" for 15; "unnamed signal" for ones without a name here.
const char* signal_name(int signal_number);

}  // namespace accelerate::launcher
