#include "launcher/supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>

#include "common/shared_memory_names.h"
#include "launcher/launch_errors.h"
#include "launcher/output_relay.h"
#include "launcher/rank_spawn.h"
#include "launcher/signal_pipe.h"

namespace accelerate::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// Poll wake-up while stopping, once every rank has exited but something it
// started may still run in its process group: a process we did not start
// sends us no SIGCHLD, so we look again at this pace until the grace ends.
constexpr std::chrono::milliseconds kGroupCheckInterval(50);
// After SIGKILL, how long to wait for the groups to empty before giving up.
constexpr std::chrono::milliseconds kWaitAfterKill(1000);

// Opens a --log_dir file for writing (the folder exists already).
int open_log(const std::string& path) {
  if (path.empty()) return -1;
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw LaunchFailure("cannot create log file '" + path + "': " + std::strerror(errno));
  return fd;
}

struct RankProcess {
  std::string name;
  pid_t pid = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  std::unique_ptr<LineRelay> stdout_relay;
  std::unique_ptr<LineRelay> stderr_relay;
  int stdout_log = -1;
  int stderr_log = -1;
  bool exited = false;
  int wait_status = 0;
};

bool failed(int wait_status) { return !(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0); }

// The launcher's exit code for a rank's wait status: its exit code, or 128+N
// for signal N, as a shell reports it.
int exit_code_for(int wait_status) {
  return WIFSIGNALED(wait_status) ? 128 + WTERMSIG(wait_status) : WEXITSTATUS(wait_status);
}

std::string describe_end(int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    int signal_number = WTERMSIG(wait_status);
    return "was killed by signal " + std::to_string(signal_number) + " (" +
           signal_name(signal_number) + ")";
  }
  return "failed with exit code " + std::to_string(WEXITSTATUS(wait_status));
}

class Supervisor {
 public:
  // As a child subreaper, the launcher adopts what a rank leaves behind when
  // it dies (instead of init), so it can reap those processes and tell when
  // a rank's process group is really empty.
  explicit Supervisor(const SupervisorSettings& settings) : settings_(settings) {
    prctl(PR_GET_CHILD_SUBREAPER, &was_subreaper_);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
  }
  ~Supervisor() {
    prctl(PR_SET_CHILD_SUBREAPER, was_subreaper_);
    for (const auto& rank : ranks_) {
      if (rank.stdout_log >= 0) close(rank.stdout_log);
      if (rank.stderr_log >= 0) close(rank.stderr_log);
    }
  }
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  SupervisorResult run() {
    start_ranks();
    while (!finished()) {
      wait_for_events();
      for (int signal_number : signals_.take_signals()) on_signal(signal_number);
      reap_ranks();
      enforce_deadlines();
    }
    // A rank killed (or crashed) while one of its shared memory segments was
    // still named left it in /dev/shm, holding memory until removed.
    for (const auto& rank : ranks_) remove_shared_memory_of(rank.pid);
    return report();
  }

 private:
  void start_ranks() {
    const bool detach_stdin = isatty(STDIN_FILENO) == 1;
    for (const auto& launch : settings_.ranks) {
      const std::string name =
          launch.name.empty() ? "rank " + std::to_string(launch.global_rank) : launch.name;
      SpawnedRank spawned;
      int logs[2] = {-1, -1};
      try {
        logs[0] = open_log(launch.stdout_log);
        logs[1] = open_log(launch.stderr_log);
        spawned = spawn_rank(settings_.command, launch.environment, detach_stdin);
      } catch (const LaunchFailure& failure) {
        for (int fd : logs) {
          if (fd >= 0) close(fd);
        }
        // Stop what already runs, then report why the job could not start.
        start_error_ = "cannot start " + name + ": " + failure.what();
        begin_stop(SIGTERM);
        break;
      }
      std::string prefix =
          settings_.prefix_output ? "[rank" + std::to_string(launch.global_rank) + "]: " : "";
      RankProcess rank;
      rank.name = name;
      rank.pid = spawned.pid;
      rank.stdout_fd = spawned.stdout_fd;
      rank.stderr_fd = spawned.stderr_fd;
      rank.stdout_log = logs[0];
      rank.stderr_log = logs[1];
      const auto clear = [](bool on) { return on ? std::string(kClearLine) : std::string(); };
      rank.stdout_relay = std::make_unique<LineRelay>(STDOUT_FILENO, prefix, logs[0],
                                                      clear(settings_.clear_stdout_line));
      rank.stderr_relay = std::make_unique<LineRelay>(STDERR_FILENO, prefix, logs[1],
                                                      clear(settings_.clear_stderr_line));
      ranks_.push_back(std::move(rank));
    }
  }

  bool all_exited() const {
    for (const auto& rank : ranks_) {
      if (!rank.exited) return false;
    }
    return true;
  }

  bool any_pipe_open() const {
    for (const auto& rank : ranks_) {
      if (rank.stdout_fd >= 0 || rank.stderr_fd >= 0) return true;
    }
    return false;
  }

  // True while some process is left in one of the ranks' groups.
  bool any_group_alive() const {
    for (const auto& rank : ranks_) {
      if (kill(-rank.pid, 0) == 0 || errno == EPERM) return true;
    }
    return false;
  }

  bool finished() {
    if (!all_exited()) return false;
    // While stopping, also wait for what the ranks started; after SIGKILL
    // only briefly (a process stuck in the kernel cannot be waited out).
    if (stopping_ && any_group_alive() &&
        (!killed_ || Clock::now() < killed_at_ + kWaitAfterKill)) {
      return false;
    }
    if (!any_pipe_open()) return true;
    // Every rank is gone but a pipe is still open (held by something the
    // rank started in the background): relay a little longer, then let go.
    if (!all_exited_at_) all_exited_at_ = Clock::now();
    if (Clock::now() - *all_exited_at_ < kDrainAfterExit) return false;
    close_all_pipes();
    return true;
  }

  // How long poll() may sleep: forever unless a deadline is pending.
  int poll_timeout_ms() const {
    std::optional<Clock::time_point> wake;
    if (stopping_ && !killed_) wake = kill_deadline_;
    if (stopping_ && all_exited()) {
      auto check = Clock::now() + kGroupCheckInterval;
      wake = wake ? std::min(*wake, check) : check;
    }
    if (all_exited_at_) {
      auto drain_end = *all_exited_at_ + kDrainAfterExit;
      wake = wake ? std::min(*wake, drain_end) : drain_end;
    }
    if (!wake) return -1;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*wake - Clock::now()).count();
    return left <= 0 ? 0 : static_cast<int>(left + 1);  // +1: never wake a hair early and spin
  }

  void wait_for_events() {
    std::vector<pollfd> fds;
    fds.push_back({signals_.read_fd(), POLLIN, 0});
    for (const auto& rank : ranks_) {
      if (rank.stdout_fd >= 0) fds.push_back({rank.stdout_fd, POLLIN, 0});
      if (rank.stderr_fd >= 0) fds.push_back({rank.stderr_fd, POLLIN, 0});
    }
    int ready = poll(fds.data(), fds.size(), poll_timeout_ms());
    if (ready <= 0) return;  // timeout, or EINTR: the signal pipe tells why
    for (auto& rank : ranks_) {
      relay_if_ready(fds, rank.stdout_fd, *rank.stdout_relay);
      relay_if_ready(fds, rank.stderr_fd, *rank.stderr_relay);
    }
  }

  static void relay_if_ready(const std::vector<pollfd>& fds, int& fd, LineRelay& relay) {
    if (fd < 0) return;
    for (const auto& entry : fds) {
      if (entry.fd == fd && entry.revents != 0) {
        relay_pipe(fd, relay);
        return;
      }
    }
  }

  void close_all_pipes() {
    for (auto& rank : ranks_) {
      if (rank.stdout_fd >= 0) relay_pipe(rank.stdout_fd, *rank.stdout_relay);
      if (rank.stderr_fd >= 0) relay_pipe(rank.stderr_fd, *rank.stderr_relay);
      for (int* fd : {&rank.stdout_fd, &rank.stderr_fd}) {
        if (*fd >= 0) close(*fd), *fd = -1;
      }
      rank.stdout_relay->finish();
      rank.stderr_relay->finish();
    }
  }

  void on_signal(int signal_number) {
    if (signal_number == SIGCHLD) return;  // reap_ranks() runs after every wake-up
    if (stopping_) {
      // Asked again while stopping: the user is out of patience.
      kill_now();
      if (!launcher_signal_) launcher_signal_ = signal_number;
      return;
    }
    launcher_signal_ = signal_number;
    begin_stop(signal_number);  // forward the same signal; the ranks may handle it
  }

  // Reaps every ended child: the ranks, and (as a subreaper) whatever they
  // started and left behind, so no zombie keeps a process group "alive".
  void reap_ranks() {
    for (;;) {
      int status = 0;
      pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid < 0 && errno == EINTR) continue;
      if (pid <= 0) return;  // 0: nothing more has ended; ECHILD: no children left
      for (auto& rank : ranks_) {
        if (rank.pid == pid && !rank.exited) on_rank_exit(rank, status);
      }
    }
  }

  void on_rank_exit(RankProcess& rank, int status) {
    rank.exited = true;
    rank.wait_status = status;
    if (failed(status) && !stopping_) {
      first_failure_ = &rank;
      running_at_failure_ = 0;
      for (const auto& other : ranks_) running_at_failure_ += other.exited ? 0 : 1;
      begin_stop(SIGTERM);
    }
  }

  void begin_stop(int signal_number) {
    stopping_ = true;
    kill_deadline_ = Clock::now() + settings_.grace_period;
    signal_groups(signal_number);
  }

  void enforce_deadlines() {
    if (stopping_ && !killed_ && Clock::now() >= kill_deadline_) kill_now();
  }

  void kill_now() {
    signal_groups(SIGKILL);
    killed_ = true;
    killed_at_ = Clock::now();
  }

  // Signals every rank's whole process group, including groups whose leader
  // has exited but whose members have not.
  void signal_groups(int signal_number) {
    for (const auto& rank : ranks_) kill(-rank.pid, signal_number);
  }

  SupervisorResult report() {
    if (!start_error_.empty()) throw LaunchFailure(start_error_);
    if (launcher_signal_ && first_failure_ == nullptr) {
      if (!settings_.quiet) {
        write_fully(STDERR_FILENO, std::string("accelerate launch: received ") +
                                       signal_name(*launcher_signal_) + "; stopped " +
                                       std::to_string(ranks_.size()) + " rank(s)\n");
      }
      return {128 + *launcher_signal_, true};
    }
    if (first_failure_ != nullptr) {
      std::string line = "accelerate launch: " + first_failure_->name + " (pid " +
                         std::to_string(first_failure_->pid) + ") " +
                         describe_end(first_failure_->wait_status);
      if (ranks_.size() > 1) {
        line += "; stopped the other " + std::to_string(running_at_failure_) + " rank(s)";
      }
      write_fully(STDERR_FILENO, line + "\n");
      // A signal that arrived while the failed group was stopping still
      // means "stop": no restart.
      return {exit_code_for(first_failure_->wait_status), launcher_signal_.has_value()};
    }
    return {0, false};
  }

  const SupervisorSettings& settings_;
  SignalPipe signals_;
  std::vector<RankProcess> ranks_;
  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point kill_deadline_;
  Clock::time_point killed_at_;
  std::optional<Clock::time_point> all_exited_at_;
  const RankProcess* first_failure_ = nullptr;
  int running_at_failure_ = 0;
  std::optional<int> launcher_signal_;
  std::string start_error_;
  int was_subreaper_ = 0;
};

}  // namespace

SupervisorResult supervise(const SupervisorSettings& settings) {
  Supervisor supervisor(settings);
  return supervisor.run();
}

}  // namespace accelerate::launcher
