// mnist_profile: where the time of examples/mnist's training step goes.
//
// The training loop of examples/mnist (train_plain.cpp for --mode plain,
// train.cpp for --mode accelerated: same BasicNet, AdamW lr 1e-3, batch 64
// per process, shuffled accelerate::DataLoader over data/mnist), with each
// phase timed, and the gradient reducer's statistics when several processes
// run it (`accelerate launch --cpu --num_processes 2 mnist_profile --mode
// accelerated`). bench/run_training_bench.sh times the example programs
// themselves; this program explains their figures (docs/performance.md).
//
// Prints on process 0 one line (here wrapped):
//
//   result workload=mnist mode=accelerated world=2 threads=1 steps=63
//     ms_per_step=… data_ms=… fwd_ms=… bwd_ms=… sync_ms=… opt_ms=…
//     comm_ms=… exposed_ms=… hidden_fraction=… buckets=…
//
// All figures are means per step over the timed epoch (the last of
// --epochs; earlier epochs warm up). data_ms: fetching the next batch from
// the loader; fwd_ms: zero_grad, forward and loss; bwd_ms: backward (for
// `accelerated` the whole accelerator.backward(), sync included); sync_ms:
// the reducer's finalize_backward(); opt_ms: optimizer step. comm_ms,
// exposed_ms, hidden_fraction: the reducer's GradientSyncStats averaged over
// the timed steps ("na" on one process).
//
// Usage: mnist_profile --mode plain|accelerated [--epochs 2] [--steps N]
//          [--data_dir data/mnist] [--batch_size 64] [--seed 42]
// --steps N stops each epoch after N steps (0: the whole epoch).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <accelerate/accelerate.h>
#include <accelerate/data/mnist.h>

#include "mnist_common.h"  // examples/mnist: BasicNet

namespace {

struct Settings {
  std::string mode;
  std::string data_dir = "data/mnist";
  int epochs = 2;
  int steps = 0;
  size_t batch_size = 64;
  double lr = 1e-3;
  uint64_t seed = 42;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "mnist_profile: error: " << message
            << "\nusage: mnist_profile --mode plain|accelerated [--epochs N] [--steps N] "
               "[--data_dir DIR] [--batch_size B] [--seed S]\n";
  std::exit(2);
}

Settings parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage_error(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--mode")
      s.mode = value;
    else if (flag == "--data_dir")
      s.data_dir = value;
    else if (flag == "--epochs")
      s.epochs = std::stoi(value);
    else if (flag == "--steps")
      s.steps = std::stoi(value);
    else if (flag == "--batch_size")
      s.batch_size = std::stoul(value);
    else if (flag == "--seed")
      s.seed = std::stoull(value);
    else
      usage_error("unknown flag " + flag);
  }
  if (s.mode != "plain" && s.mode != "accelerated")
    usage_error("--mode must be plain or accelerated");
  if (s.epochs < 1 || s.steps < 0 || s.batch_size < 1)
    usage_error("bad --epochs, --steps or --batch_size");
  return s;
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

struct Totals {
  int64_t steps = 0;
  double step = 0, data = 0, forward = 0, backward = 0, optimizer = 0;
  double sync = 0, communication = 0, exposed = 0, hidden = 0;
  int64_t synced = 0;
  int buckets = 0;
};

std::string per_step(double total, int64_t steps) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f",
                total / static_cast<double>(std::max<int64_t>(1, steps)));
  return text;
}

void report(const Settings& s, int world, const Totals& t) {
  const bool stats = t.synced > 0;
  std::cout << "result workload=mnist mode=" << s.mode << " world=" << world
            << " threads=" << torch::get_num_threads() << " steps=" << t.steps
            << " ms_per_step=" << per_step(t.step, t.steps)
            << " data_ms=" << per_step(t.data, t.steps)
            << " fwd_ms=" << per_step(t.forward, t.steps)
            << " bwd_ms=" << per_step(t.backward, t.steps)
            << " sync_ms=" << (stats ? per_step(t.sync, t.synced) : "na")
            << " opt_ms=" << per_step(t.optimizer, t.steps)
            << " comm_ms=" << (stats ? per_step(t.communication, t.synced) : "na")
            << " exposed_ms=" << (stats ? per_step(t.exposed, t.synced) : "na")
            << " hidden_fraction=" << (stats ? per_step(t.hidden, t.synced) : "na")
            << " buckets=" << (stats ? std::to_string(t.buckets) : "na") << std::endl;
}

// One training epoch with per-phase clocks. `backward` runs the backward
// pass (loss.backward() or accelerator.backward(loss)); `after_backward`
// records the reducer's statistics of the step.
template <class Loader, class Optimizer, class Backward, class AfterBackward>
Totals train_epoch(const Settings& s, mnist::BasicNet& model, Optimizer& optimizer, Loader& loader,
                   Backward backward, AfterBackward after_backward) {
  Totals t;
  model->train();
  auto fetch_start = Clock::now();
  auto it = loader.begin();
  double fetch = ms_since(fetch_start);
  while (it != loader.end()) {
    auto& batch = *it;
    const auto start = Clock::now();
    optimizer.zero_grad();
    auto loss = torch::nll_loss(model->forward(batch.data), batch.target);
    t.forward += ms_since(start);
    auto phase = Clock::now();
    backward(loss);
    t.backward += ms_since(phase);
    after_backward(t);
    phase = Clock::now();
    optimizer.step();
    t.optimizer += ms_since(phase);
    t.data += fetch;
    t.step += fetch + ms_since(start);
    ++t.steps;
    if (s.steps > 0 && t.steps >= s.steps) break;
    fetch_start = Clock::now();
    ++it;
    fetch = ms_since(fetch_start);
  }
  return t;
}

void run_plain(const Settings& s) {
  mnist::BasicNet model;
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(s.lr));
  accelerate::DataLoader train(accelerate::MnistDataset(s.data_dir, accelerate::MnistSplit::kTrain),
                               accelerate::DataLoaderOptions(s.batch_size).shuffle(true));
  Totals t;
  for (int epoch = 1; epoch <= s.epochs; ++epoch) {
    t = train_epoch(
        s, model, optimizer, train, [](const torch::Tensor& loss) { loss.backward(); },
        [](Totals&) {});
  }
  report(s, 1, t);
}

void run_accelerated(const Settings& s) {
  accelerate::Accelerator accelerator;
  mnist::BasicNet model;
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                       torch::optim::AdamWOptions(s.lr));
  accelerate::DataLoader train(accelerate::MnistDataset(s.data_dir, accelerate::MnistSplit::kTrain),
                               accelerate::DataLoaderOptions(s.batch_size).shuffle(true));
  accelerator.prepare(model, optimizer, train);
  const accelerate::GradientReducer* reducer =
      accelerator.reducers().empty() ? nullptr : accelerator.reducers().front();
  Totals t;
  for (int epoch = 1; epoch <= s.epochs; ++epoch) {
    if (accelerator.num_processes() > 1) accelerator.wait_for_everyone();
    t = train_epoch(
        s, model, optimizer, train, [&](const torch::Tensor& loss) { accelerator.backward(loss); },
        [&](Totals& totals) {
          if (reducer == nullptr) return;
          const auto stats = reducer->last_step_stats();
          totals.sync += stats.finalize_seconds * 1e3;
          totals.communication += stats.communication_seconds * 1e3;
          totals.exposed += stats.exposed_wait_seconds * 1e3;
          totals.hidden += stats.hidden_fraction();
          totals.buckets = stats.bucket_count;
          ++totals.synced;
        });
  }
  if (accelerator.num_processes() > 1) accelerator.wait_for_everyone();
  if (accelerator.is_main_process()) report(s, accelerator.num_processes(), t);
}

}  // namespace

int main(int argc, char** argv) try {
  const Settings settings = parse(argc, argv);
  if (const char* threads = std::getenv("OMP_NUM_THREADS")) {
    if (std::atoi(threads) > 0) torch::set_num_threads(std::atoi(threads));
  }
  torch::manual_seed(settings.seed);
  if (settings.mode == "plain") {
    run_plain(settings);
  } else {
    run_accelerated(settings);
  }
  return 0;
} catch (const std::exception& error) {
  std::cerr << "mnist_profile: error: " << error.what() << std::endl;
  return 1;
}
