// A small program the launcher tests run under `accelerate launch`. Each mode
// shows one behaviour from inside a rank; it needs no LibTorch, so the tests
// stay quick. Usage: launch_probe MODE [ARGS...]
//   env VAR...                 print "VAR=value" (or "VAR is unset") and "PID=<pid>"
//   args ARG...                print each argument on its own line
//   exit CODE                  exit with CODE
//   partial TEXT               print TEXT with no newline and exit 0
//   lines COUNT                print COUNT long lines to stdout and to stderr,
//                              written in chunks that cut lines in the middle
//   sleep DIR                  write DIR/rank{RANK}.pid, then sleep 30 s
//   sleep-ignoring-term DIR    same, with SIGTERM ignored
//   sleep-with-child DIR       same, after starting a child that writes
//                              DIR/child{RANK}.pid and sleeps too
//   fail-on-rank R CODE DIR    rank R waits until every other local rank has
//                              written its pid file, then exits CODE; the
//                              others run `sleep-with-child DIR`
//   signal-on-rank R SIG DIR   same, but rank R kills itself with SIG
//   leave-shm DIR              write DIR/rank{RANK}.pid, create a shared
//                              memory name as the library names its
//                              segments (shared_memory_prefix), then kill
//                              itself with SIGKILL, leaving the name behind
//   resume DIR STEPS R K       a job that saves progress: each rank resumes
//                              from DIR/progress{RANK} (its last saved step),
//                              saves after every step (20 ms each), prints
//                              "rank R attempt A starts at step S" and
//                              "rank R finished"; rank R kills itself with
//                              SIGKILL right after saving step K when
//                              ACCELERATE_RESTART_COUNT is 0 (once every
//                              rank has saved at least once)
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "common/shared_memory_names.h"

namespace {

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : fallback;
}

int rank() { return env_int("RANK", 0); }

void write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

// Written to a temporary name and renamed, so a reader never sees half a pid.
void write_pid_file(const std::string& path) {
  std::string temporary = path + ".tmp";
  std::ofstream(temporary) << getpid() << "\n";
  std::rename(temporary.c_str(), path.c_str());
}

std::string pid_file(const std::string& dir, const std::string& kind, int number) {
  return dir + "/" + kind + std::to_string(number) + ".pid";
}

[[noreturn]] void sleep_and_exit(int seconds) {
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  std::exit(0);
}

[[noreturn]] void sleep_mode(const std::string& dir) {
  write_pid_file(pid_file(dir, "rank", rank()));
  sleep_and_exit(30);
}

[[noreturn]] void sleep_with_child(const std::string& dir) {
  if (fork() == 0) {
    write_pid_file(pid_file(dir, "child", rank()));
    sleep_and_exit(30);
  }
  // The rank's pid file promises the child's is there too.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (access(pid_file(dir, "child", rank()).c_str(), F_OK) != 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  sleep_mode(dir);
}

// Waits (at most 5 s) until every other local rank has written its pid file,
// so the failure happens while they are certainly running.
void wait_for_other_ranks(const std::string& dir) {
  const int first = env_int("GROUP_RANK", 0) * env_int("LOCAL_WORLD_SIZE", 1);
  const int count = env_int("LOCAL_WORLD_SIZE", 1);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (int r = first; r < first + count; ++r) {
    if (r == rank()) continue;
    while (access(pid_file(dir, "rank", r).c_str(), F_OK) != 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

int lines_mode(int count) {
  std::string out;
  std::string err;
  const std::string filler(100, 'x');
  for (int i = 0; i < count; ++i) {
    out +=
        "rank " + std::to_string(rank()) + " line " + std::to_string(i) + " " + filler + " end\n";
    err += "rank " + std::to_string(rank()) + " err " + std::to_string(i) + "\n";
  }
  // Odd-sized chunks cut lines in the middle: the launcher must reassemble.
  for (std::size_t at = 0; at < out.size(); at += 997) write_all(1, out.substr(at, 997));
  for (std::size_t at = 0; at < err.size(); at += 61) write_all(2, err.substr(at, 61));
  return 0;
}

int resume_mode(const std::string& dir, int steps, int failing_rank, int failing_step) {
  const std::string progress = dir + "/progress" + std::to_string(rank());
  int step = 0;
  std::ifstream(progress) >> step;  // no file yet: start at 0
  const int attempt = env_int("ACCELERATE_RESTART_COUNT", -1);
  write_all(1, "rank " + std::to_string(rank()) + " attempt " + std::to_string(attempt) +
                   " starts at step " + std::to_string(step) + "\n");
  while (step < steps) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ++step;
    const std::string temporary = progress + ".tmp";
    std::ofstream(temporary) << step << "\n";
    std::rename(temporary.c_str(), progress.c_str());
    if (rank() == failing_rank && step == failing_step && attempt == 0) {
      // Die only once the other ranks have saved something, so that their
      // resuming from a save is certain to be seen (at most 5 s).
      for (int r = 0; r < env_int("WORLD_SIZE", 1); ++r) {
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (access((dir + "/progress" + std::to_string(r)).c_str(), F_OK) != 0 &&
               std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
      raise(SIGKILL);
    }
  }
  write_all(1, "rank " + std::to_string(rank()) + " finished\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: launch_probe MODE [ARGS...]\n");
    return 64;
  }
  const std::string mode = argv[1];
  if (mode == "env") {
    std::string text;
    for (int i = 2; i < argc; ++i) {
      const char* value = std::getenv(argv[i]);
      text += std::string(argv[i]) + (value ? "=" + std::string(value) : " is unset") + "\n";
    }
    text += "PID=" + std::to_string(getpid()) + "\n";
    write_all(1, text);
    return 0;
  }
  if (mode == "args") {
    for (int i = 2; i < argc; ++i) write_all(1, std::string(argv[i]) + "\n");
    return 0;
  }
  if (mode == "exit" && argc == 3) return std::atoi(argv[2]);
  if (mode == "partial" && argc == 3) {
    write_all(1, argv[2]);
    return 0;
  }
  if (mode == "lines" && argc == 3) return lines_mode(std::atoi(argv[2]));
  if (mode == "sleep" && argc == 3) sleep_mode(argv[2]);
  if (mode == "sleep-ignoring-term" && argc == 3) {
    signal(SIGTERM, SIG_IGN);
    sleep_mode(argv[2]);
  }
  if (mode == "sleep-with-child" && argc == 3) sleep_with_child(argv[2]);
  if ((mode == "fail-on-rank" || mode == "signal-on-rank") && argc == 5) {
    if (rank() != std::atoi(argv[2])) sleep_with_child(argv[4]);
    wait_for_other_ranks(argv[4]);
    if (mode == "signal-on-rank") raise(std::atoi(argv[3]));
    return std::atoi(argv[3]);
  }
  if (mode == "leave-shm" && argc == 3) {
    write_pid_file(pid_file(argv[2], "rank", rank()));
    const std::string name = accelerate::shared_memory_prefix(getpid()) + "left";
    const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    if (fd < 0) return 70;
    raise(SIGKILL);
  }
  if (mode == "resume" && argc == 6) {
    return resume_mode(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]));
  }
  std::fprintf(stderr, "launch_probe: unknown mode or wrong arguments: %s\n", mode.c_str());
  return 64;
}
