// How long `accelerate launch` takes to start and finish a job, next to what
// a Python launcher pays before it can start anything (HF issue #1952: seconds
// of imports). Prints one table: median wall time of each command and its
// ratio to ours. Run: ./build/bench/launch/launch_bench [runs]
//
// Rows:
//   ours, no-op           accelerate launch --cpu --num_processes 2 /bin/true
//   torchrun, no-op       python3 -m torch.distributed.run --nproc_per_node 2
//                         /bin/true, when it runs; Debian's torch 1.13 on
//                         Python 3.11 crashes at start (docs/launching.md), and
//                         then the row says so
//   python launcher floor python3 importing torch.distributed.run and
//                         starting 2 /bin/true: the least any torchrun-like
//                         launcher in Python costs, crash or not
//   ours, hello world     accelerate launch ... hello_distributed (2 ranks
//                         joining a Gloo group and reducing)
//   no launcher, hello    the same 2 ranks started by hand with RANK etc.:
//                         the difference is the launcher's own cost
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

struct Command {
  std::vector<std::string> argv;
  std::vector<std::string> extra_env;  // "KEY=VALUE" added to ours
};

// Starts every command at once (one job = its ranks), waits for all; returns
// the wall time in ms, or -1 when one failed.
double run_once(const std::vector<Command>& commands) {
  posix_spawn_file_actions_t quiet;
  posix_spawn_file_actions_init(&quiet);
  posix_spawn_file_actions_addopen(&quiet, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&quiet, 2, "/dev/null", O_WRONLY, 0);
  const auto start = Clock::now();
  std::vector<pid_t> pids;
  for (const auto& command : commands) {
    std::vector<std::string> env_strings;
    for (char** entry = environ; *entry != nullptr; ++entry) env_strings.emplace_back(*entry);
    env_strings.insert(env_strings.end(), command.extra_env.begin(), command.extra_env.end());
    std::vector<char*> argv, envp;
    for (const auto& arg : command.argv) argv.push_back(const_cast<char*>(arg.c_str()));
    for (const auto& entry : env_strings) envp.push_back(const_cast<char*>(entry.c_str()));
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    pid_t pid = -1;
    if (posix_spawnp(&pid, argv[0], &quiet, nullptr, argv.data(), envp.data()) == 0)
      pids.push_back(pid);
  }
  bool ok = pids.size() == commands.size();
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  posix_spawn_file_actions_destroy(&quiet);
  return ok ? ms : -1;
}

// Median of `runs` timed runs after one warm-up (page cache, ccache'd
// binaries); -1 when any run failed.
double median_ms(const std::vector<Command>& commands, int runs) {
  if (run_once(commands) < 0) return -1;
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    double ms = run_once(commands);
    if (ms < 0) return -1;
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int port_for(int offset) { return 29000 + static_cast<int>(getpid() % 400) + offset; }

std::vector<Command> hello_by_hand(const std::string& hello, int port) {
  std::vector<Command> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.push_back(
        {{hello},
         {"RANK=" + std::to_string(rank), "LOCAL_RANK=" + std::to_string(rank), "WORLD_SIZE=2",
          "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port),
          "ACCELERATE_USE_CPU=true", "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1"}});
  }
  return ranks;
}

void row(const char* name, double ms, double ours, const char* note) {
  if (ms < 0) {
    std::printf("  %-24s %12s  %8s  %s\n", name, "failed", "", note);
    return;
  }
  std::printf("  %-24s %9.1f ms  %7.1fx  %s\n", name, ms, ms / ours, note);
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 10;
  const std::string accelerate = ACCELERATE_CLI_PATH;
  const std::string hello = HELLO_DISTRIBUTED_PATH;
  const std::string python = "/usr/bin/python3";
  auto launch = [&](const std::string& program, int port) {
    return std::vector<Command>{{{accelerate, "launch", "--cpu", "--num_processes", "2", "-q",
                                  "--main_process_port", std::to_string(port), program},
                                 {}}};
  };

  const double ours = median_ms(launch("/bin/true", port_for(0)), runs * 3);
  const double torchrun = median_ms({{{python, "-m", "torch.distributed.run", "--nproc_per_node",
                                       "2", "--no_python", "/bin/true"},
                                      {}}},
                                    std::max(1, runs / 3));
  const double python_floor =
      median_ms({{{python, "-c",
                   "import torch.distributed.run, subprocess\n"
                   "ps = [subprocess.Popen(['/bin/true']) for _ in range(2)]\n"
                   "raise SystemExit(max(p.wait() for p in ps))"},
                  {}}},
                std::max(1, runs / 3));
  const double ours_hello = median_ms(launch(hello, port_for(1)), std::max(1, runs / 2));
  const double hand_hello = median_ms(hello_by_hand(hello, port_for(2)), std::max(1, runs / 2));

  std::printf("accelerate launch start-up, median of %d runs (ratio = time / ours, no-op)\n", runs);
  row("ours, no-op", ours, ours, "accelerate launch --cpu --num_processes 2 /bin/true");
  row("torchrun, no-op", torchrun, ours,
      torchrun < 0 ? "python3 -m torch.distributed.run: crashes at start on Debian's torch 1.13"
                   : "python3 -m torch.distributed.run --nproc_per_node 2 /bin/true");
  row("python launcher floor", python_floor, ours, "import torch.distributed.run + 2 x /bin/true");
  row("ours, hello world", ours_hello, ours,
      "accelerate launch ... hello_distributed (2 ranks, Gloo)");
  row("no launcher, hello", hand_hello, ours, "the same 2 ranks started by hand");
  if (ours > 0 && ours_hello > 0 && hand_hello > 0) {
    std::printf("launcher cost on the hello world: %+.1f ms\n", ours_hello - hand_hello);
  }
  const double python_best = torchrun > 0 ? std::min(torchrun, python_floor) : python_floor;
  if (ours > 0 && python_best > 0) {
    std::printf("goal: ours < 50 ms (%s) and >= 20x faster than a Python launcher (%.0fx: %s)\n",
                ours < 50 ? "met" : "MISSED", python_best / ours,
                python_best / ours >= 20 ? "met" : "MISSED");
  }
  return ours > 0 ? 0 : 1;
}
