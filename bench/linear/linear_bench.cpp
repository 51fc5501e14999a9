// linear_bench: the communication-heavy training workload of the training
// benchmark (docs/performance.md): 6 x (Linear(1024,1024) + ReLU), batch 32
// per process of fixed synthetic data, MSE loss, SGD lr 0.01. The same
// workload as bench/python/linear_ddp.py.
//
//   linear_bench --mode plain        a plain single-process LibTorch loop
//   linear_bench --mode accelerated  the same loop through accelerate::Accelerator
//                                    (1 process, or N under `accelerate launch`)
//
// Runs --warmup untimed steps, then --steps timed ones (after a barrier when
// there are several processes), and prints on process 0 one machine-readable
// line:
//
//   result workload=linear mode=accelerated world=2 threads=1 steps=100
//     ms_per_step=<median> mean_ms=<mean> min_ms=… max_ms=… fwd_ms=… bwd_ms=…
//     sync_ms=… opt_ms=… comm_ms=… exposed_ms=… hidden_fraction=… buckets=…
//     final_loss=…
//
// (one line). Per-phase figures are medians over the timed steps: fwd_ms the
// forward and loss, bwd_ms backward (for `accelerated` the whole
// accelerator.backward(), gradient sync included), sync_ms the reducer's
// finalize_backward(), opt_ms the optimizer step and zero_grad. comm_ms,
// exposed_ms and hidden_fraction are the reducer's GradientSyncStats
// (communication in flight, wait blocked in finalize, and 1 - exposed/comm)
// averaged over the timed steps; "na" with one process.
//
// --bucket_cap_mb / --first_bucket_cap_mb set the reducer's bucket caps
// (GradientSyncOptions) for experiments.
//
// Threads: torch::set_num_threads(OMP_NUM_THREADS) when it is set (the
// Accelerator does the same); set OPENBLAS_NUM_THREADS alike (it has its own pool).
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <accelerate/accelerate.h>

namespace {

struct Settings {
  std::string mode;
  int steps = 100;
  int warmup = 10;
  int batch = 32;
  int layers = 6;
  int width = 1024;
  double lr = 0.01;
  uint64_t seed = 0;
  // Reducer bucket caps for experiments (0: the library's defaults).
  double bucket_cap_mb = 0;
  double first_bucket_cap_mb = 0;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::cerr << "linear_bench: error: " << message
            << "\nusage: linear_bench --mode plain|accelerated [--steps N] [--warmup N] "
               "[--batch B] [--layers L] [--width W] [--lr LR] [--seed S]\n"
               "       [--bucket_cap_mb MB] [--first_bucket_cap_mb MB]   (accelerated only)\n";
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
    else if (flag == "--steps")
      s.steps = std::stoi(value);
    else if (flag == "--warmup")
      s.warmup = std::stoi(value);
    else if (flag == "--batch")
      s.batch = std::stoi(value);
    else if (flag == "--layers")
      s.layers = std::stoi(value);
    else if (flag == "--width")
      s.width = std::stoi(value);
    else if (flag == "--lr")
      s.lr = std::stod(value);
    else if (flag == "--seed")
      s.seed = std::stoull(value);
    else if (flag == "--bucket_cap_mb")
      s.bucket_cap_mb = std::stod(value);
    else if (flag == "--first_bucket_cap_mb")
      s.first_bucket_cap_mb = std::stod(value);
    else
      usage_error("unknown flag " + flag);
  }
  if (s.mode != "plain" && s.mode != "accelerated")
    usage_error("--mode must be plain or accelerated");
  if (s.steps < 1 || s.warmup < 0 || s.batch < 1 || s.layers < 1 || s.width < 1) {
    usage_error("--steps, --batch, --layers and --width must be positive, --warmup >= 0");
  }
  return s;
}

torch::nn::Sequential make_model(const Settings& s) {
  torch::nn::Sequential model;
  for (int i = 0; i < s.layers; ++i) {
    model->push_back(torch::nn::Linear(s.width, s.width));
    model->push_back(torch::nn::ReLU());
  }
  return model;
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// Per-step timings of the timed steps.
struct Timings {
  std::vector<double> step, forward, backward, sync, optimizer;
  std::vector<double> communication, exposed, hidden;  // reducer stats, world > 1
  int buckets = 0;
};

std::string fixed(double value, int digits = 3) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", digits, value);
  return text;
}

void report(const Settings& s, int world, const Timings& t, double final_loss) {
  const bool stats = !t.hidden.empty();
  std::cout << "result workload=linear mode=" << s.mode << " world=" << world
            << " threads=" << torch::get_num_threads() << " steps=" << s.steps
            << " ms_per_step=" << fixed(median(t.step)) << " mean_ms=" << fixed(mean(t.step))
            << " min_ms=" << fixed(*std::min_element(t.step.begin(), t.step.end()))
            << " max_ms=" << fixed(*std::max_element(t.step.begin(), t.step.end()))
            << " fwd_ms=" << fixed(median(t.forward)) << " bwd_ms=" << fixed(median(t.backward))
            << " sync_ms=" << (stats ? fixed(median(t.sync)) : "na")
            << " opt_ms=" << fixed(median(t.optimizer))
            << " comm_ms=" << (stats ? fixed(mean(t.communication)) : "na")
            << " exposed_ms=" << (stats ? fixed(mean(t.exposed)) : "na")
            << " hidden_fraction=" << (stats ? fixed(mean(t.hidden)) : "na")
            << " buckets=" << (stats ? std::to_string(t.buckets) : "na")
            << " final_loss=" << fixed(final_loss, 6) << std::endl;
}

// Fixed synthetic inputs and targets; each process draws its own from
// seed + 1 + rank (as linear_ddp.py does).
std::pair<torch::Tensor, torch::Tensor> make_data(const Settings& s, int rank) {
  auto generator = at::detail::createCPUGenerator(s.seed + 1 + static_cast<uint64_t>(rank));
  auto x = torch::randn({s.batch, s.width}, generator);
  auto y = torch::randn({s.batch, s.width}, generator);
  return {x, y};
}

// A plain single-process LibTorch loop: no accelerate at all.
void run_plain(const Settings& s) {
  torch::manual_seed(s.seed);
  auto model = make_model(s);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(s.lr));
  auto [x, y] = make_data(s, 0);

  Timings t;
  double final_loss = 0;
  for (int i = 0; i < s.warmup + s.steps; ++i) {
    const auto start = Clock::now();
    optimizer.zero_grad();
    auto loss = torch::mse_loss(model->forward(x), y);
    const double forward = ms_since(start);
    auto phase = Clock::now();
    loss.backward();
    const double backward = ms_since(phase);
    phase = Clock::now();
    optimizer.step();
    const double opt = ms_since(phase);
    const double step = ms_since(start);
    if (i >= s.warmup) {
      t.step.push_back(step);
      t.forward.push_back(forward);
      t.backward.push_back(backward);
      t.optimizer.push_back(opt);
      if (i + 1 == s.warmup + s.steps) final_loss = loss.item<double>();
    }
  }
  report(s, 1, t, final_loss);
}

// The same loop through the Accelerator (the lines a user changes: the
// Accelerator, accelerate::Optimizer, prepare, accelerator.backward).
void run_accelerated(const Settings& s) {
  accelerate::GradientSyncOptions sync;
  if (s.bucket_cap_mb > 0) sync.bucket_cap_mb(s.bucket_cap_mb);
  if (s.first_bucket_cap_mb > 0) sync.first_bucket_cap_mb(s.first_bucket_cap_mb);
  // Sets the threads from OMP_NUM_THREADS too.
  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().ddp_options(sync));
  torch::manual_seed(s.seed);
  auto model = make_model(s);
  accelerate::Optimizer<torch::optim::SGD> optimizer(model->parameters(),
                                                     torch::optim::SGDOptions(s.lr));
  accelerator.prepare(model, optimizer);
  auto [x, y] = make_data(s, accelerator.process_index());
  x = x.to(accelerator.device());
  y = y.to(accelerator.device());

  const int world = accelerator.num_processes();
  const accelerate::GradientReducer* reducer =
      accelerator.reducers().empty() ? nullptr : accelerator.reducers().front();
  Timings t;
  double final_loss = 0;
  for (int i = 0; i < s.warmup + s.steps; ++i) {
    if (i == s.warmup && world > 1) accelerator.wait_for_everyone();
    const auto start = Clock::now();
    optimizer.zero_grad();
    auto loss = torch::mse_loss(model->forward(x), y);
    const double forward = ms_since(start);
    auto phase = Clock::now();
    accelerator.backward(loss);
    const double backward = ms_since(phase);
    phase = Clock::now();
    optimizer.step();
    const double opt = ms_since(phase);
    const double step = ms_since(start);
    if (i >= s.warmup) {
      t.step.push_back(step);
      t.forward.push_back(forward);
      t.backward.push_back(backward);
      t.optimizer.push_back(opt);
      if (reducer != nullptr) {
        const auto stats = reducer->last_step_stats();
        t.sync.push_back(stats.finalize_seconds * 1e3);
        t.communication.push_back(stats.communication_seconds * 1e3);
        t.exposed.push_back(stats.exposed_wait_seconds * 1e3);
        t.hidden.push_back(stats.hidden_fraction());
        t.buckets = stats.bucket_count;
      }
      if (i + 1 == s.warmup + s.steps) final_loss = loss.item<double>();
    }
  }
  if (world > 1) accelerator.wait_for_everyone();
  if (accelerator.is_main_process()) report(s, world, t, final_loss);
}

}  // namespace

int main(int argc, char** argv) try {
  const Settings settings = parse(argc, argv);
  if (const char* threads = std::getenv("OMP_NUM_THREADS")) {
    if (std::atoi(threads) > 0) torch::set_num_threads(std::atoi(threads));
  }
  if (settings.mode == "plain") {
    run_plain(settings);
  } else {
    run_accelerated(settings);
  }
  return 0;
} catch (const std::exception& error) {
  std::cerr << "linear_bench: error: " << error.what() << std::endl;
  return 1;
}
