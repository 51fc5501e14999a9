// ZeRO stage 3 with zero3_init_flag against stage 3 with every process
// building the whole model, side by side: each process's resident memory
// above its baseline (VmRSS before the model exists) after building the
// model inside accelerator.zero3_init(), after prepare(), and at its peak
// (VmHWM, reset at the baseline) through one training step with fp32 AdamW.
//
// Resident memory is what a machine's memory limit sees, but it is coarse:
// glibc keeps freed blocks resident (after a large free it raises its mmap
// threshold, so later blocks come from the heap), so after prepare() it
// still counts buffers that were freed. The live tensor bytes after
// prepare() (the compat layer's counting CPU allocator) are printed too: they
// are what the process holds.
// The reference job runs first, then the zero3_init job, each as fresh
// forked processes; the parent prints per process the two side by side and
// their ratio.
//
// Usage: zero_init_memory_bench [--ranks 2] [--depth 16] [--width 1024]
#include <fcntl.h>
#include <unistd.h>

#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "compat/memory_compat.h"
#include "support/forked_ranks.h"
#include "zero/block_stack.h"

namespace {

struct Settings {
  int ranks = 2, depth = 16, width = 1024;
};

Settings parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::stoi(argv[i + 1]);
    if (flag == "--ranks") {
      s.ranks = value;
    } else if (flag == "--depth") {
      s.depth = value;
    } else if (flag == "--width") {
      s.width = value;
    } else {
      throw std::invalid_argument("unknown flag " + flag);
    }
  }
  return s;
}

// A field of /proc/self/status in MB ("VmRSS", "VmHWM").
double status_mb(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      std::istringstream values(line.substr(field.size() + 1));
      double kb = 0;
      values >> kb;
      return kb / 1024.0;
    }
  }
  return -1;
}

// VmHWM restarts from the current RSS (Linux 4.0+: clear_refs 5).
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }

struct Figures {
  double built = 0, prepared = 0, peak = 0;  // resident, above the baseline
  double tensors = 0;                        // live tensor bytes after prepare()
};

Figures run_rank(std::shared_ptr<accelerate::Communicator> comm, const Settings& s,
                 bool init_flag) {
  accelerate::Accelerator accelerator(
      std::move(comm), accelerate::AcceleratorOptions().deepspeed_plugin(
                           accelerate::DeepSpeedPlugin().zero_stage(3).zero3_init_flag(init_flag)));
  accelerate::compat::install_cpu_allocation_counter();
  accelerator.wait_for_everyone();
  const double baseline = status_mb("VmRSS");
  const double tensors_before = accelerate::compat::cpu_live_bytes() / 1e6;
  reset_peak();
  Figures f;
  bench::BlockStack model{nullptr};
  {
    auto init = accelerator.zero3_init();
    torch::manual_seed(3);
    model = bench::BlockStack(s.depth, s.width);
  }
  f.built = status_mb("VmRSS") - baseline;
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                       torch::optim::AdamWOptions(1e-3));
  accelerator.prepare(model, optimizer);
  f.prepared = status_mb("VmRSS") - baseline;
  f.tensors = accelerate::compat::cpu_live_bytes() / 1e6 - tensors_before;
  const auto x = torch::randn({32, s.width});
  accelerator.backward(model->forward(x).pow(2).mean());
  optimizer.step();
  optimizer.zero_grad();
  accelerator.wait_for_everyone();
  f.peak = status_mb("VmHWM") - baseline;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  try {
    s = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zero_init_memory_bench: %s\n", e.what());
    return 2;
  }
  const double psi = s.depth * 2.0 * (double(s.width) * s.width + s.width);
  std::printf(
      "ZeRO-3 on %d processes: %d blocks of two Linear(%d, %d), Ψ = %.1fM, fp32 weights "
      "%.1f MB, 16Ψ/N = %.1f MB\n",
      s.ranks, s.depth, s.width, s.width, psi / 1e6, 4 * psi / 1e6, 16 * psi / s.ranks / 1e6);
  std::fflush(stdout);  // before fork: the children would print it again
  // Each forked process appends its line; the parent reads them all.
  // (Not run_forked_ranks' store file, which is named after the program.)
  const std::string results = "/tmp/zero_init_memory_bench-results-" + std::to_string(getpid());
  std::map<std::pair<bool, int>, Figures> figures;
  for (bool init_flag : {false, true}) {
    const int status = bench::run_forked_ranks(
        "zero_init_memory_bench", s.ranks, [&](std::shared_ptr<accelerate::Communicator> comm) {
          const int rank = comm->rank();
          const Figures f = run_rank(std::move(comm), s, init_flag);
          char line[200];
          const int n =
              std::snprintf(line, sizeof line, "%d %d %.3f %.3f %.3f %.3f\n", init_flag ? 1 : 0,
                            rank, f.built, f.prepared, f.peak, f.tensors);
          const int fd = ::open(results.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
          if (fd >= 0) {
            if (::write(fd, line, static_cast<size_t>(n)) != n) std::perror("write");
            ::close(fd);
          }
        });
    if (status != 0) {
      std::fprintf(stderr, "zero_init_memory_bench: a process failed\n");
      return 1;
    }
  }
  std::ifstream in(results);
  int flag = 0, rank = 0;
  Figures f;
  while (in >> flag >> rank >> f.built >> f.prepared >> f.peak >> f.tensors) {
    figures[{flag == 1, rank}] = f;
  }
  ::unlink(results.c_str());
  std::printf(
      "MB per process (whole model built everywhere | zero3_init; ratio): resident "
      "above the baseline after building the model, after prepare() and at the peak "
      "of one step; live tensors after prepare()\n");
  for (int r = 0; r < s.ranks; ++r) {
    const Figures& a = figures[{false, r}];
    const Figures& b = figures[{true, r}];
    std::printf(
        "rank %d  built %6.1f | %6.1f (%.2fx)  prepared %6.1f | %6.1f (%.2fx)  peak "
        "%6.1f | %6.1f (%.2fx)  tensors %6.1f | %6.1f (%.2fx)\n",
        r, a.built, b.built, b.built / a.built, a.prepared, b.prepared, b.prepared / a.prepared,
        a.peak, b.peak, b.peak / a.peak, a.tensors, b.tensors, b.tensors / a.tensors);
  }
  return 0;
}
