// Sharded training's collectives against the all-reduce they replace: for
// flat float buffers of several sizes, the time of an all-reduce (sum), a
// reduce-scatter (Communicator::reduce_scatter_sum) and an all-gather
// (all_gather_into) of the same buffer, on each CPU transport: shared memory
// and Gloo over loopback, the reduce-scatter both from a private buffer and
// from one made by Communicator::reduce_scatter_buffer (which the sharded
// engine's buckets use; through shared memory, peers read it in place).
// "both" is the latter plus the all-gather. A reduce-scatter moves half of an all-reduce's
// bytes, so the goal is reduce-scatter <= 0.6x all-reduce; reduce-scatter +
// all-gather (what ZeRO stages 1 and 2 do per step) should cost about one
// all-reduce.
//
// Each time is the slowest rank's (a collective is done when every rank is),
// the median over --reps after two warm-up rounds; ranks meet at a barrier
// before each collective.
//
// Usage: zero_collectives_bench [--ranks 2,4] [--mb 1,8,32] [--reps 9]
//          [--transport both|shm|gloo]
// Started without WORLD_SIZE it forks the ranks (one job per rank count and
// transport); under `accelerate launch` it measures that job's transport.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "accelerate/common/malloc_tuning.h"
#include "accelerate/distributed/communicator.h"
#include "support/flag_pairs.h"
#include "support/forked_ranks.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Settings {
  std::vector<int> ranks = {2, 4};
  std::vector<double> megabytes = {1, 8, 32};
  int reps = 9;
  std::string transport = "both";
};

std::vector<double> numbers(const std::string& text) {
  std::vector<double> values;
  for (const std::string& item : bench::comma_items(text)) values.push_back(std::stod(item));
  return values;
}

Settings parse(int argc, char** argv) {
  Settings s;
  for (const auto& [flag, value] : bench::flag_pairs(argc, argv)) {
    if (flag == "--ranks") {
      s.ranks.clear();
      for (double r : numbers(value)) s.ranks.push_back(static_cast<int>(r));
    } else if (flag == "--mb") {
      s.megabytes = numbers(value);
    } else if (flag == "--reps") {
      s.reps = std::stoi(value);
    } else if (flag == "--transport") {
      if (value != "both" && value != "shm" && value != "gloo") {
        throw std::invalid_argument("--transport expects both, shm or gloo, got '" + value + "'");
      }
      s.transport = value;
    } else {
      throw std::invalid_argument("unknown flag " + flag);
    }
  }
  return s;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Milliseconds until the slowest rank finished `collective`.
template <class Collective>
double slowest_ms(accelerate::Communicator& comm, Collective&& collective) {
  comm.barrier();
  const Clock::time_point start = Clock::now();
  collective();
  at::Tensor ms = at::full(
      {1}, std::chrono::duration<double, std::milli>(Clock::now() - start).count(), at::kDouble);
  comm.all_reduce(ms, accelerate::ReduceOp::kMax);
  return ms.item<double>();
}

void run_rank(accelerate::Communicator& comm, const Settings& s) {
  torch::set_num_threads(1);
  accelerate::tune_malloc_for_training();  // as the Accelerator does: staging buffers are reused
  const int world = comm.world_size();
  const char* transport = comm.sums_cpu_tensors_in_shared_memory() ? "shared memory" : "gloo";
  for (double mb : s.megabytes) {
    const int64_t shard_numel = static_cast<int64_t>(mb * (1 << 20) / 4) / world;
    at::Tensor buffer = at::randn({shard_numel * world});
    at::Tensor shard = at::empty({shard_numel});
    // What sharded training reduce-scatters from: a buffer the communicator
    // made (in shared memory, read by peers in place, where it has one).
    at::Tensor own = comm.reduce_scatter_buffer(buffer.numel(), buffer.options());
    own.copy_(buffer);
    std::vector<double> all_reduce, reduce_scatter, from_own, all_gather;
    for (int rep = 0; rep < s.reps + 2; ++rep) {
      const double ar =
          slowest_ms(comm, [&] { comm.all_reduce(buffer, accelerate::ReduceOp::kSum); });
      const double rs = slowest_ms(comm, [&] { comm.reduce_scatter_sum(buffer, shard); });
      const double rs_own = slowest_ms(comm, [&] { comm.reduce_scatter_sum(own, shard); });
      const double ag = slowest_ms(comm, [&] { comm.all_gather_into(shard, buffer); });
      if (rep < 2) continue;  // warm-up
      all_reduce.push_back(ar);
      reduce_scatter.push_back(rs);
      from_own.push_back(rs_own);
      all_gather.push_back(ag);
    }
    if (comm.rank() != 0) continue;
    const double ar = median(all_reduce), rs = median(reduce_scatter), ag = median(all_gather);
    const double rs_own = median(from_own);
    std::printf(
        "%-13s ranks=%d %6.1f MB  all-reduce %7.2f ms  reduce-scatter %7.2f ms (%.2fx)  "
        "from reduce_scatter_buffer %7.2f ms (%.2fx)  all-gather %7.2f ms (%.2fx)  "
        "both %7.2f ms (%.2fx)\n",
        transport, world, mb, ar, rs, rs / ar, rs_own, rs_own / ar, ag, ag / ar, rs_own + ag,
        (rs_own + ag) / ar);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
  try {
    settings = parse(argc, argv);
  } catch (const std::exception& error) {
    std::cerr << "zero_collectives_bench: " << error.what() << "\n";
    return 2;
  }
  std::vector<bool> transports;
  if (settings.transport != "gloo") transports.push_back(true);
  if (settings.transport != "shm") transports.push_back(false);
  return bench::run_forked_jobs(
      "zero-collectives-bench", settings.ranks, transports,
      [&](std::shared_ptr<accelerate::Communicator> comm) { run_rank(*comm, settings); });
}
