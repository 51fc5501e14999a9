// What sharded training sends between machines: one rank of a job started
// by `accelerate launch` (the sharding comes from its flags), training the
// GPT example's model on random tokens. After warm-up steps it counts a
// window of steps and prints, per rank, one line:
//
//   network_bench: rank R machine M step_ms=... sent=... received=...
//       sent_off_machine=... received_off_machine=... [link_tx=... link_rx=...]
//       groups=job:.../process group #1 (ranks 0, 1):...
//
// all per step: the communicator's counts (Communicator::traffic), and, on
// each machine's local rank 0, the bytes its network interface (the one
// `accelerate launch` named in GLOO_SOCKET_IFNAME) sent and received in the
// same window, read from /sys/class/net (TCP/IP headers included, and the
// traffic of every rank of the machine). bench/zero/run_network_bench.sh
// runs it on two network namespaces and prints the ratios.
//
// Usage: network_bench [--preset small] [--batch 2] [--warmup 2] [--steps 5]
#include <accelerate/accelerate.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "presets.h"
#include "support/flag_pairs.h"

namespace {

struct Settings {
  std::string preset = "small";
  int64_t batch = 2;
  int warmup = 2;
  int steps = 5;
};

Settings parse(int argc, char** argv) {
  Settings s;
  for (const auto& [flag, value] : bench::flag_pairs(argc, argv)) {
    if (flag == "--preset") {
      s.preset = value;
    } else if (flag == "--batch") {
      s.batch = std::stoll(value);
    } else if (flag == "--warmup") {
      s.warmup = std::stoi(value);
    } else if (flag == "--steps") {
      s.steps = std::stoi(value);
    } else {
      throw std::invalid_argument("unknown flag " + flag);
    }
  }
  if (s.batch < 1 || s.warmup < 0 || s.steps < 1) {
    throw std::invalid_argument("--batch and --steps must be positive, --warmup not negative");
  }
  return s;
}

// Bytes a network interface has sent and received so far; -1 when unknown.
struct LinkBytes {
  long long tx = -1, rx = -1;
};

long long read_counter(const std::string& path) {
  std::ifstream in(path);
  long long value = -1;
  if (!(in >> value)) return -1;
  return value;
}

LinkBytes link_bytes(const std::string& interface) {
  if (interface.empty()) return {};
  const std::string base = "/sys/class/net/" + interface + "/statistics/";
  return {read_counter(base + "tx_bytes"), read_counter(base + "rx_bytes")};
}

int run(const Settings& s) {
  accelerate::Accelerator accelerator;
  accelerate::set_seed(3);
  gpt::Gpt model(gpt::preset_config(s.preset, 8192));
  const auto config = model->config();
  long long parameters = 0;  // counted before prepare shards them
  for (const auto& p : model->parameters()) parameters += p.numel();
  long long unit_parameters = 0;  // in the blocks, stage 3's units; the rest stays whole
  for (const auto& block : *model->transformer->h) {
    for (const auto& p : block->parameters()) unit_parameters += p.numel();
  }
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                       torch::optim::AdamWOptions(1e-4));
  accelerator.prepare(model, optimizer);

  auto generator = at::detail::createCPUGenerator(100 + accelerator.process_index());
  const at::Tensor tokens =
      at::randint(config.vocab_size, {s.batch, config.n_positions}, generator);
  const at::Tensor targets = tokens.roll(-1, 1);
  const auto step = [&] {
    accelerator.backward(model->loss_on_shifted_labels(tokens, targets));
    optimizer.step();
    optimizer.zero_grad();
  };
  for (int i = 0; i < s.warmup; ++i) step();

  accelerate::Communicator& comm = accelerator.communicator();
  const int node = comm.job().node_rank;
  const char* interface_variable = std::getenv("GLOO_SOCKET_IFNAME");
  const std::string interface =
      comm.job().local_rank == 0 && interface_variable ? interface_variable : "";
  comm.barrier();
  comm.reset_traffic();
  const LinkBytes before = link_bytes(interface);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < s.steps; ++i) step();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const auto traffic = comm.traffic();  // before the barrier below counts anything
  comm.barrier();
  const LinkBytes after = link_bytes(interface);

  const auto per_step = [&](unsigned long long bytes) { return bytes / s.steps; };
  const accelerate::TrafficCount sum = accelerate::total(traffic);
  std::printf(
      "network_bench: rank %d machine %d step_ms=%.1f sent=%llu received=%llu "
      "sent_off_machine=%llu received_off_machine=%llu",
      accelerator.process_index(), node, ms / s.steps, per_step(sum.bytes_sent),
      per_step(sum.bytes_received), per_step(sum.bytes_sent_off_machine),
      per_step(sum.bytes_received_off_machine));
  if (before.tx >= 0 && after.tx >= 0) {
    std::printf(" link_tx=%lld link_rx=%lld", (after.tx - before.tx) / s.steps,
                (after.rx - before.rx) / s.steps);
  }
  std::printf(" groups=");
  for (std::size_t g = 0; g < traffic.size(); ++g) {
    const auto count = traffic[g].total();
    std::printf("%s%s:%llu/%llu", g ? ";" : "", traffic[g].group.c_str(),
                per_step(count.bytes_sent), per_step(count.bytes_sent_off_machine));
  }
  std::printf(" parameters=%lld unit_parameters=%lld\n", parameters, unit_parameters);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& error) {
    std::cerr << "network_bench: error: " << error.what() << "\n";
    return 1;
  }
}
