// Measures how much of the gradient all-reduce the reducer hides behind
// backward, on an MLP of `depth` Linear(width, width) layers.
//
// Each rank times three kinds of step (medians over --steps):
//   compute   forward + backward, no communication
//   blocking  forward + backward, then the same buckets all-reduced one
//             after another (what a reducer without overlap costs); the
//             all-reduce part alone is the communication time
//   overlap   forward + backward + finalize_backward() with the reducer
// hidden = (blocking - overlap) / communication: the share of communication
// that overlap removed from the step. The reducer's own statistics
// (GradientSyncStats) are printed beside it, and so is when backward
// returned in the overlapped step: where ranks share few cores, Gloo's
// copies compete with backward for them, backward slows down by about what
// the wait shrinks, and step time does not improve (docs/gradient-sync.md).
//
// Usage: gradient_sync_bench [--ranks N] [--depth D] [--width W] [--batch B]
//          [--steps S] [--bucket-cap-mb MB] [--threads T]
// Started without WORLD_SIZE it forks N ranks that meet through a FileStore;
// under `accelerate launch` (or torchrun) it joins that job instead.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "accelerate/distributed/communicator.h"
#include "accelerate/parallel/gradient_reducer.h"
#include "support/forked_ranks.h"

namespace {

struct Settings {
  int ranks = 2;
  int depth = 6;
  int width = 1024;
  int batch = 32;
  int steps = 20;
  double bucket_cap_mb = 25;
  int threads = 1;
};

Settings parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--ranks")
      s.ranks = std::atoi(value);
    else if (flag == "--depth")
      s.depth = std::atoi(value);
    else if (flag == "--width")
      s.width = std::atoi(value);
    else if (flag == "--batch")
      s.batch = std::atoi(value);
    else if (flag == "--steps")
      s.steps = std::atoi(value);
    else if (flag == "--bucket-cap-mb")
      s.bucket_cap_mb = std::atof(value);
    else if (flag == "--threads")
      s.threads = std::atoi(value);
    else {
      std::cerr << "gradient_sync_bench: unknown flag " << flag << "\n";
      std::exit(2);
    }
  }
  return s;
}

using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

torch::nn::Sequential make_model(const Settings& s) {
  torch::nn::Sequential model;
  for (int i = 0; i < s.depth; ++i) {
    model->push_back(torch::nn::Linear(s.width, s.width));
    model->push_back(torch::nn::Tanh());
  }
  return model;
}

// The blocking baseline: the reducer's buckets, flattened and all-reduced
// one after another once backward is over.
double blocking_all_reduce(accelerate::Communicator& comm, const std::vector<torch::Tensor>& params,
                           const std::vector<accelerate::GradientBucket>& buckets) {
  const auto start = Clock::now();
  for (const auto& bucket : buckets) {
    std::vector<torch::Tensor> pieces;
    for (auto index : bucket.parameter_indices) pieces.push_back(params[index].grad().reshape(-1));
    auto flat = torch::cat(pieces);
    comm.all_reduce(flat, accelerate::ReduceOp::kSum);
    flat.div_(comm.world_size());
    int64_t offset = 0;
    for (auto index : bucket.parameter_indices) {
      auto& grad = params[index].mutable_grad();
      grad.copy_(flat.narrow(0, offset, grad.numel()).view(grad.sizes()));
      offset += grad.numel();
    }
  }
  return since(start);
}

void run_rank(accelerate::Communicator& comm_ref, std::shared_ptr<accelerate::Communicator> comm,
              const Settings& s) {
  torch::set_num_threads(s.threads);
  auto model = make_model(s);
  accelerate::broadcast_module_state(comm_ref, *model);
  auto params = model->parameters();
  accelerate::GradientReducer reducer(
      comm, params, accelerate::GradientSyncOptions().bucket_cap_mb(s.bucket_cap_mb));
  auto x = torch::randn({s.batch, s.width});
  auto step = [&] {
    for (auto& p : params) p.mutable_grad().reset();
    model->forward(x).pow(2).mean().backward();
  };
  std::vector<double> compute, blocking, communication, overlap, overlap_backward, hidden_by_stats,
      exposed;
  for (int i = 0; i < s.steps + 2; ++i) {  // two warm-up steps
    const bool record = i >= 2;
    reducer.set_sync_enabled(false);
    comm_ref.barrier();
    auto start = Clock::now();
    step();
    if (record) compute.push_back(since(start));

    comm_ref.barrier();
    start = Clock::now();
    step();
    const double comm_time = blocking_all_reduce(comm_ref, params, reducer.buckets());
    if (record) {
      blocking.push_back(since(start));
      communication.push_back(comm_time);
    }

    reducer.set_sync_enabled(true);
    comm_ref.barrier();
    start = Clock::now();
    step();
    const double backward_done = since(start);
    reducer.finalize_backward();
    if (record) {
      overlap.push_back(since(start));
      overlap_backward.push_back(backward_done);
      const auto stats = reducer.last_step_stats();
      hidden_by_stats.push_back(stats.hidden_fraction());
      exposed.push_back(stats.exposed_wait_seconds);
    }
  }
  if (comm_ref.rank() != 0) return;
  const double t_compute = median(compute), t_blocking = median(blocking);
  const double t_comm = median(communication), t_overlap = median(overlap);
  const double hidden = t_comm > 0 ? std::clamp((t_blocking - t_overlap) / t_comm, 0.0, 1.0) : 0;
  std::printf(
      "ranks %d, %d x Linear(%d,%d), batch %d, %d threads/rank, %zu buckets (cap %.1f MiB)\n",
      comm_ref.world_size(), s.depth, s.width, s.width, s.batch, s.threads,
      reducer.buckets().size(), s.bucket_cap_mb);
  std::printf("  compute only        %8.2f ms/step\n", t_compute * 1e3);
  std::printf("  blocking sync       %8.2f ms/step (all-reduce alone %.2f ms)\n", t_blocking * 1e3,
              t_comm * 1e3);
  std::printf(
      "  overlapped reducer  %8.2f ms/step (backward returned at %.2f ms, then waited %.2f ms"
      " in finalize)\n",
      t_overlap * 1e3, median(overlap_backward) * 1e3, median(exposed) * 1e3);
  std::printf(
      "  communication hidden: %.0f%% (step times); reducer stats say %.0f%% of in-flight time\n",
      100 * hidden, 100 * median(hidden_by_stats));
}

}  // namespace

int main(int argc, char** argv) {
  const Settings settings = parse(argc, argv);
  return bench::run_forked_ranks(
      "gradient-sync-bench", settings.ranks,
      [&](std::shared_ptr<accelerate::Communicator> comm) { run_rank(*comm, comm, settings); });
}
