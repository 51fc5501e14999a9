#include "launcher/signal_pipe.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "launcher/launch_errors.h"

namespace accelerate::launcher {
namespace {

// The handler can reach only globals; one SignalPipe exists at a time.
volatile sig_atomic_t g_signal_write_fd = -1;

void on_signal(int signal_number) {
  int saved_errno = errno;  // the interrupted code may be about to read errno
  unsigned char byte = static_cast<unsigned char>(signal_number);
  if (g_signal_write_fd >= 0) {
    // Non-blocking: if the pipe is full, wake-ups are already pending.
    ssize_t ignored = write(g_signal_write_fd, &byte, 1);
    (void)ignored;
  }
  errno = saved_errno;
}

}  // namespace

SignalPipe::SignalPipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw LaunchFailure(std::string("cannot create the signal pipe: ") + std::strerror(errno));
  }
  read_fd_ = fds[0];
  write_fd_ = fds[1];
  g_signal_write_fd = write_fd_;

  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART keeps blocking writes to our stdout going; poll() still
  // returns EINTR and the loop simply polls again.
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  int index = 0;
  for (int signal_number : kHandledSignals) sigaction(signal_number, &action, &previous_[index++]);

  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, &previous_sigpipe_);
}

SignalPipe::~SignalPipe() {
  int index = 0;
  for (int signal_number : kHandledSignals) sigaction(signal_number, &previous_[index++], nullptr);
  sigaction(SIGPIPE, &previous_sigpipe_, nullptr);
  g_signal_write_fd = -1;
  close(read_fd_);
  close(write_fd_);
}

std::vector<int> SignalPipe::take_signals() {
  std::vector<int> signals;
  unsigned char buffer[64];
  for (;;) {
    ssize_t n = read(read_fd_, buffer, sizeof(buffer));
    if (n > 0) {
      signals.insert(signals.end(), buffer, buffer + n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;  // EAGAIN: empty
    }
  }
  return signals;
}

void reset_signals_in_child(const sigset_t& mask) {
  struct sigaction original {};
  original.sa_handler = SIG_DFL;
  sigemptyset(&original.sa_mask);
  for (int signal_number : kHandledSignals) sigaction(signal_number, &original, nullptr);
  // SIG_IGN survives exec, so SIGPIPE must be set back explicitly.
  sigaction(SIGPIPE, &original, nullptr);
  sigprocmask(SIG_SETMASK, &mask, nullptr);
}

const char* signal_name(int signal_number) {
  switch (signal_number) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGTRAP:
      return "SIGTRAP";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGALRM:
      return "SIGALRM";
    case SIGTERM:
      return "SIGTERM";
    case SIGXCPU:
      return "SIGXCPU";
    case SIGXFSZ:
      return "SIGXFSZ";
    case SIGSYS:
      return "SIGSYS";
    default:
      return "unnamed signal";
  }
}

}  // namespace accelerate::launcher
