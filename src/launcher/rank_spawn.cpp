#include "launcher/rank_spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "launcher/launch_errors.h"
#include "launcher/signal_pipe.h"

namespace accelerate::launcher {
namespace {

// execve wants NULL-terminated arrays of char*; the strings stay owned by
// the caller's vectors.
std::vector<char*> as_c_array(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (const auto& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

// In the child: make `fd` the descriptor `target`, open across exec.
void move_to(int fd, int target) {
  if (fd == target) {
    fcntl(fd, F_SETFD, 0);  // dup2 onto itself would keep close-on-exec
  } else {
    dup2(fd, target);
  }
}

void write_text(int fd, const char* text) {
  ssize_t ignored = write(fd, text, std::strlen(text));
  (void)ignored;
}

[[noreturn]] void run_child(pid_t launcher_pid, const std::vector<char*>& argv,
                            const std::vector<char*>& envp, const char* executable, int out_fd,
                            int err_fd, bool detach_stdin, const sigset_t& original_mask) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The launcher may have died before prctl ran; then nobody would ever
  // deliver the death signal, so leave now.
  if (getppid() != launcher_pid) _exit(1);
  move_to(out_fd, STDOUT_FILENO);
  move_to(err_fd, STDERR_FILENO);
  if (detach_stdin) {
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) move_to(null_fd, STDIN_FILENO);
  }
  reset_signals_in_child(original_mask);
  execve(executable, argv.data(), envp.data());
  // strerror is safe enough here: the launcher is single-threaded, so no
  // other thread can have held a lock at fork time.
  int error = errno;
  write_text(STDERR_FILENO, "accelerate launch: error: cannot execute '");
  write_text(STDERR_FILENO, executable);
  write_text(STDERR_FILENO, "': ");
  write_text(STDERR_FILENO, std::strerror(error));
  write_text(STDERR_FILENO, "\n");
  _exit(127);  // the shell's "command not found" code
}

}  // namespace

SpawnedRank spawn_rank(const ResolvedCommand& command, const std::vector<std::string>& environment,
                       bool detach_stdin) {
  std::vector<char*> argv = as_c_array(command.argv);
  std::vector<char*> envp = as_c_array(environment);

  // Close-on-exec, so no rank inherits another rank's pipe and keeps it
  // open (its reader would never see end of file).
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    throw LaunchFailure(std::string("cannot create a pipe: ") + std::strerror(errno));
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    int error = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    throw LaunchFailure(std::string("cannot create a pipe: ") + std::strerror(error));
  }

  // Block signals across fork: the child must not run the launcher's
  // handlers (they would write into the launcher's signal pipe) before it
  // resets them.
  sigset_t all;
  sigset_t original;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &original);
  pid_t launcher_pid = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    run_child(launcher_pid, argv, envp, command.executable.c_str(), out_pipe[1], err_pipe[1],
              detach_stdin, original);
  }
  int fork_error = errno;
  sigprocmask(SIG_SETMASK, &original, nullptr);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (pid < 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    throw LaunchFailure(std::string("cannot start a process (fork): ") + std::strerror(fork_error));
  }
  // Also from the parent, so kill(-pid) works even if the child has not run
  // yet; after the child's exec this fails harmlessly (it did it itself).
  setpgid(pid, pid);
  fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
  fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
  return SpawnedRank{pid, out_pipe[0], err_pipe[0]};
}

}  // namespace accelerate::launcher
