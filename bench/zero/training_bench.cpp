// ZeRO stages 0, 1 and 2 side by side on one model: per-process bytes of
// parameters + gradients + optimizer state (fp32 AdamW) against the ZeRO
// formulas 16Ψ, 8Ψ + 8Ψ/N and 4Ψ + 12Ψ/N, and the median step time against
// stage 0 on the same number of processes.
//
// Bytes are counted from the tensors themselves after a step (each storage
// once): the model's parameters (flat buffers at stages 1 and 2, padded),
// their .grad (the gradient buckets they are views of), the reducer's
// gradient shards (stage 2), and every optimizer state tensor. The bucket
// a stage-2 process builds for each reduce-scatter lives only during that
// step's backward and is not counted; the goal allows the formulas + 5%
// plus bucket buffers.
//
// Usage: zero_training_bench [--ranks 2,4] [--depth 8] [--width 512]
//          [--batch 32] [--steps 20]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "accelerate/accelerator.h"
#include "accelerate/malloc_tuning.h"
#include "support/forked_ranks.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Settings {
  std::vector<int> ranks = {2, 4};
  int depth = 8;
  int width = 512;
  int batch = 32;
  int steps = 20;
};

Settings parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
    const std::string value = argv[i + 1];
    if (flag == "--ranks") {
      s.ranks.clear();
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');) s.ranks.push_back(std::stoi(item));
    } else if (flag == "--depth") {
      s.depth = std::stoi(value);
    } else if (flag == "--width") {
      s.width = std::stoi(value);
    } else if (flag == "--batch") {
      s.batch = std::stoi(value);
    } else if (flag == "--steps") {
      s.steps = std::stoi(value);
    } else {
      throw std::invalid_argument("unknown flag " + flag);
    }
  }
  return s;
}

torch::nn::Sequential make_model(const Settings& s) {
  torch::manual_seed(3);
  torch::nn::Sequential model;
  for (int i = 0; i < s.depth; ++i) {
    model->push_back(torch::nn::Linear(s.width, s.width));
    model->push_back(torch::nn::ReLU());
  }
  return model;
}

// Bytes of the distinct storages behind `tensors`.
struct StorageCounter {
  std::set<const void*> seen;
  double bytes = 0;
  void add(const at::Tensor& tensor) {
    if (!tensor.defined()) return;
    const void* key = tensor.storage().data();
    if (key == nullptr || !seen.insert(key).second) return;
    bytes += static_cast<double>(tensor.storage().nbytes());
  }
};

struct Measured {
  double state_bytes = 0;  // parameters + gradients + optimizer state
  double step_ms = 0;
};

Measured run_stage(accelerate::Communicator& comm, std::shared_ptr<accelerate::Communicator> owner,
                   const Settings& s, int stage) {
  accelerate::AcceleratorOptions options;
  // Stage 0 is plain data parallelism, so the ZeRO runs do not clip either.
  if (stage > 0) {
    options.deepspeed_plugin(
        accelerate::DeepSpeedPlugin().zero_stage(stage).gradient_clipping(std::nullopt));
  }
  accelerate::Accelerator accelerator(owner, options);
  auto model = make_model(s);
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                       torch::optim::AdamWOptions(1e-4));
  accelerator.prepare(model, optimizer);
  auto generator = at::detail::createCPUGenerator(100 + comm.rank());
  const at::Tensor x = at::randn({s.batch, s.width}, generator);
  std::vector<double> times;
  for (int step = 0; step < s.steps + 2; ++step) {  // two warm-up steps
    comm.barrier();
    const Clock::time_point start = Clock::now();
    accelerator.backward(model->forward(x).pow(2).mean());
    optimizer.step();
    optimizer.zero_grad();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (step >= 2) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  StorageCounter counter;
  for (const auto& p : model->parameters()) {
    counter.add(p);
    counter.add(p.grad());
  }
  for (const auto& reducer : accelerator.reducers()) {
    if (reducer->partition() != accelerate::GradientPartition::kSharded) continue;
    for (std::size_t b = 0; b < reducer->buckets().size(); ++b)
      counter.add(reducer->gradient_shard(b));
  }
  for (const auto& entry : optimizer.state()) {
    // AdamW's state: exp_avg and exp_avg_sq (max_exp_avg_sq only with amsgrad).
    auto& state = static_cast<torch::optim::AdamWParamState&>(*entry.second);
    counter.add(state.exp_avg());
    counter.add(state.exp_avg_sq());
    counter.add(state.max_exp_avg_sq());
  }
  // The slowest rank's bytes and median step.
  at::Tensor both = at::tensor({counter.bytes, times[times.size() / 2]}, at::kDouble);
  comm.all_reduce(both, accelerate::ReduceOp::kMax);
  return {both[0].item<double>(), both[1].item<double>()};
}

void run_rank(accelerate::Communicator& comm, std::shared_ptr<accelerate::Communicator> owner,
              const Settings& s) {
  torch::set_num_threads(1);
  accelerate::tune_malloc_for_training();
  const double n = comm.world_size();
  double psi = 0;
  for (const auto& p : make_model(s)->parameters()) psi += static_cast<double>(p.numel());
  const double formula[] = {16 * psi, 8 * psi + 8 * psi / n, 4 * psi + 12 * psi / n};
  double stage0_ms = 0;
  for (int stage = 0; stage <= 2; ++stage) {
    const Measured m = run_stage(comm, owner, s, stage);
    if (stage == 0) stage0_ms = m.step_ms;
    if (comm.rank() != 0) continue;
    std::printf(
        "ranks=%d stage %d  state %8.2f MB  formula %8.2f MB  (%.3fx)  step %7.2f ms  (%.2fx "
        "stage 0)\n",
        comm.world_size(), stage, m.state_bytes / 1e6, formula[stage] / 1e6,
        m.state_bytes / formula[stage], m.step_ms, m.step_ms / stage0_ms);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
  try {
    settings = parse(argc, argv);
  } catch (const std::exception& error) {
    std::cerr << "zero_training_bench: " << error.what() << "\n";
    return 2;
  }
  return bench::run_forked_jobs(
      "zero-training-bench", settings.ranks, {true},
      [&](std::shared_ptr<accelerate::Communicator> comm) { run_rank(*comm, comm, settings); });
}
