// zero_training_bench --memory_limit_mb: a model whose stage-0 training
// state does not fit in the budget per process but whose stage-3 state does,
// trained at stage 0 and then at stage 3 by fresh processes whose address
// space is limited (RLIMIT_AS) to their baseline plus the budget.
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <thread>

#include "support/forked_ranks.h"
#include "zero/training_bench.h"

namespace zero_training_bench {

namespace {

double vm_bytes(const char* field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(field, 0) == 0) return std::stod(line.substr(std::strlen(field))) * 1024;
  }
  return 0;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

bool is_out_of_memory(const std::string& message) {
  return message.find("not enough memory") != std::string::npos ||
         message.find("can't allocate memory") != std::string::npos ||
         message.find("bad_alloc") != std::string::npos ||
         message.find("Cannot allocate memory") != std::string::npos;
}

enum LimitedExit { kTrained = 0, kError = 1, kOutOfMemory = 3 };

// Stage 3's per-process bytes within a step, as measured by the table
// above: 16Ψ/N of state, two gathered units, and the full-size gradient
// bucket of every unit, which the reducer keeps until the end of the
// backward pass (src/parallel/reducer_state.cpp frees them in finalize), so
// 4Ψ more today.
double stage3_estimate(double psi, int n, int depth) {
  return 16 * psi / n + 4 * psi + 2 * 4 * psi / depth;
}

// A model of `depth` blocks whose width puts the budget halfway between
// stage 3's estimate and stage 0's 16Ψ (on 2 processes with 16 blocks:
// 12.5Ψ and 16Ψ, each 12% from the budget), so that neither outcome hangs
// on a few MB.
int demo_width(double budget_bytes, int n, int depth) {
  const double per_parameter = (16 + stage3_estimate(1, n, depth)) / 2;
  const double per_block = budget_bytes / per_parameter / depth;  // 2(W² + W)
  return static_cast<int>((-1 + std::sqrt(1 + 2 * per_block)) / 2);
}

// One rank of a job whose address space is limited; returns its exit code.
int limited_rank(std::shared_ptr<accelerate::Communicator> comm, const Settings& s, int stage,
                 int width, double budget_bytes) {
  torch::set_num_threads(1);
  one_blas_thread();
  // Every block above 128 KB mmapped and unmapped on its own (a fixed
  // threshold also stops glibc from raising it), so that the address space
  // follows the live tensors instead of the heap's fragmentation.
  mallopt(M_MMAP_THRESHOLD, 128 << 10);
  // A tiny run at the same stage first, so that what LibTorch, Gloo and the
  // library create once (threads with their stacks and malloc arenas,
  // lazily loaded code) is in the baseline below and not charged to the
  // budget.
  {
    accelerate::Accelerator accelerator(comm, stage_options(stage, Settings(), comm->world_size()));
    auto model = make_model(2, 8);
    accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                         torch::optim::AdamWOptions(1e-4));
    accelerator.prepare(model, optimizer);
    accelerator.backward(model->forward(at::ones({2, 8})).pow(2).mean());
    optimizer.step();
    // A product above OpenBLAS's small-matrix path, which maps its buffer.
    at::mm(at::ones({256, 256}), at::ones({256, 256}));
  }
  // RLIMIT_AS limits virtual memory, not resident memory: libtorch's code,
  // thread stacks, malloc arenas and the shared-memory transport's segment
  // are already hundreds of MB of address space before any model exists. The
  // limit is therefore this process's address space now plus the budget.
  const double baseline = vm_bytes("VmSize:");
  const rlimit limit{static_cast<rlim_t>(baseline + budget_bytes),
                     static_cast<rlim_t>(baseline + budget_bytes)};
  if (setrlimit(RLIMIT_AS, &limit) != 0) {
    std::printf("rank %d: setrlimit(RLIMIT_AS) failed\n", comm->rank());
    return kError;
  }
  const char* name = stage == 0 ? "stage 0 (data parallelism)" : "stage 3";
  if (comm->rank() == 0) {
    std::printf("%s: RLIMIT_AS %.1f MB = this process's %.1f MB after a tiny warm-up + %.1f MB\n",
                name, (baseline + budget_bytes) / 1e6, baseline / 1e6, budget_bytes / 1e6);
    std::fflush(stdout);
  }
  std::string message;
  std::string where = "building the model";
  bool out_of_memory = false;
  try {
    accelerate::Accelerator accelerator(comm, stage_options(stage, Settings(), comm->world_size()));
    auto model = make_model(s.depth, width);
    accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                         torch::optim::AdamWOptions(1e-4));
    where = "prepare()";
    accelerator.prepare(model, optimizer);
    auto generator = at::detail::createCPUGenerator(100 + comm->rank());
    const at::Tensor x = at::randn({s.batch, width}, generator);
    double first_loss = 0, last_loss = 0;
    for (int step = 0; step < s.steps; ++step) {
      const std::string in_step = "step " + std::to_string(step + 1) + ", ";
      where = in_step + "forward";
      at::Tensor loss = model->forward(x).pow(2).mean();
      (step == 0 ? first_loss : last_loss) = loss.item<double>();
      where = in_step + "backward";
      accelerator.backward(loss);
      where = in_step + "optimizer";
      optimizer.step();
      optimizer.zero_grad();
    }
    at::Tensor peak = at::tensor({vm_bytes("VmPeak:") - baseline}, at::kDouble);
    comm->all_reduce(peak, accelerate::ReduceOp::kMax);
    if (comm->rank() == 0) {
      std::printf(
          "%s: trained %d steps (loss %.4g -> %.4g); address space used above the baseline: "
          "at most %.1f MB of the %.1f MB allowed\n",
          name, s.steps, first_loss, s.steps > 1 ? last_loss : first_loss,
          peak.item<double>() / 1e6, budget_bytes / 1e6);
    }
    std::fflush(stdout);
    return kTrained;
  } catch (const std::bad_alloc& error) {
    message = std::string("std::bad_alloc: ") + error.what();
    out_of_memory = true;
  } catch (const c10::Error& error) {
    message = first_line(error.what_without_backtrace());
    out_of_memory = is_out_of_memory(message);
  } catch (const std::exception& error) {
    message = first_line(error.what());
    out_of_memory = is_out_of_memory(message);
  }
  std::printf("%s, rank %d: %s in %s: %s\n", name, comm->rank(),
              out_of_memory ? "out of memory" : "failed", where.c_str(), message.c_str());
  std::fflush(stdout);
  return out_of_memory ? kOutOfMemory : kError;
}

// Forks the job's ranks; when one fails, the others may wait forever in a
// collective it will not join, so they are stopped after a grace period.
// Returns each rank's outcome.
std::vector<std::string> run_limited_job(const Settings& s, int n, int stage, int width,
                                         double budget_bytes) {
  const std::string store =
      "/tmp/zero-memory-limit-" + std::to_string(getpid()) + "-" + std::to_string(stage);
  ::unlink(store.c_str());
  std::fflush(stdout);
  std::vector<pid_t> children;
  for (int rank = 0; rank < n; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      int code = kError;
      try {
        accelerate::JobState job = bench::forked_job(rank, n);
        job.timeout = std::chrono::seconds(60);
        code = limited_rank(accelerate::Communicator::connect_through_file(store, job), s, stage,
                            width, budget_bytes);
      } catch (const std::exception& error) {
        std::printf("rank %d: %s\n", rank, first_line(error.what()).c_str());
      }
      std::fflush(stdout);
      std::_Exit(code);
    }
    children.push_back(pid);
  }
  std::vector<std::string> outcome(n, "running");
  int running = n;
  Clock::time_point stop_at = Clock::time_point::max();
  bool stopped_peers = false;
  // Whatever happens (a rank stuck without failing), the job ends.
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(300);
  bool gave_up = false;
  while (running > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      if (!gave_up && Clock::now() > give_up) {
        std::printf("stage %d: no result after 300 s, stopping its processes\n", stage);
        stop_at = Clock::now();
        gave_up = true;
      }
      if (Clock::now() > stop_at) {
        for (int r = 0; r < n; ++r) {
          if (outcome[r] == "running") kill(children[r], SIGKILL);
        }
        stopped_peers = true;
        stop_at = Clock::time_point::max();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    const int r =
        static_cast<int>(std::find(children.begin(), children.end(), pid) - children.begin());
    if (r == n) continue;
    --running;
    if (WIFEXITED(status) && WEXITSTATUS(status) == kTrained) {
      outcome[r] = "trained";
      continue;
    }
    if (WIFEXITED(status)) {
      outcome[r] = WEXITSTATUS(status) == kOutOfMemory ? "out of memory" : "failed";
    } else {
      outcome[r] = WTERMSIG(status) == SIGKILL && stopped_peers
                       ? (gave_up ? "stopped after 300 s"
                                  : "stopped: a peer failed and its collectives could not finish")
                       : "killed by signal " + std::to_string(WTERMSIG(status));
    }
    // A peer that ran out of memory at the same point ends by itself.
    if (!stopped_peers && stop_at == Clock::time_point::max() && running > 0)
      stop_at = Clock::now() + std::chrono::seconds(10);
  }
  ::unlink(store.c_str());
  return outcome;
}

}  // namespace

int run_memory_demo(const Settings& s) {
  const int n = s.ranks.front();
  const double budget = s.memory_limit_mb * 1e6;
  const int width = demo_width(budget, n, s.depth);
  const double psi = s.depth * parameters_of_block(width);
  std::printf(
      "memory limit: %.0f MB of address space per process above its baseline, %d processes\n"
      "model: %d blocks x 2 Linear(%d, %d), Ψ = %.2fM parameters, batch %d, fp32 AdamW\n"
      "  stage 0 needs 16Ψ = %.1f MB (+ activations); stage 3 about 16Ψ/N + 4Ψ of gradient "
      "buckets + 2 units = %.1f MB (+ activations)\n",
      s.memory_limit_mb, n, s.depth, width, width, psi / 1e6, s.batch, 16 * psi / 1e6,
      stage3_estimate(psi, n, s.depth) / 1e6);
  std::fflush(stdout);
  bool as_expected = true;
  for (int stage : {0, 3}) {
    const std::vector<std::string> outcome = run_limited_job(s, n, stage, width, budget);
    std::printf("=> stage %d:", stage);
    bool trained = true;
    for (int r = 0; r < n; ++r) {
      std::printf(" rank %d %s%s", r, outcome[r].c_str(), r + 1 < n ? ";" : "\n");
      trained = trained && outcome[r] == "trained";
    }
    const bool oom = std::find(outcome.begin(), outcome.end(), "out of memory") != outcome.end();
    as_expected = as_expected && (stage == 0 ? oom : trained);
    std::fflush(stdout);
  }
  std::printf("%s\n", as_expected ? "as expected: stage 0 ran out of memory, stage 3 trained"
                                  : "NOT as expected (see above)");
  return as_expected ? 0 : 1;
}

}  // namespace zero_training_bench
