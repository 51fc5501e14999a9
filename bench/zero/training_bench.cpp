// ZeRO stages 0-3 side by side on one model: per-process bytes of
// parameters + gradients + optimizer state (fp32 AdamW) against the ZeRO
// formulas 16Ψ, 8Ψ + 8Ψ/N, 4Ψ + 12Ψ/N and 16Ψ/N, the peak of those bytes
// within a step, and the median step time against stage 0 on the same
// number of processes.
//
// The model is a stack of residual blocks (two Linear layers each) called
// through accelerate::unit_forward, so that stage 3 makes every block a unit
// and stages 0-2 run it as plain calls.
//
// Steady-state bytes are counted from the tensors themselves after a step
// (each storage once): the model's parameters (flat buffers at stages 1 and
// 2, padded; at stage 3 a unit's parameters alias a buffer whose memory is
// freed after the step, so they count 0), the tensors the optimizer steps
// (stage 3's shards are tensors of their own), their .grad, the reducer's
// gradient shards (stages 2 and 3), and every optimizer state tensor.
//
// The peak within a step comes from a counting CPU allocator installed in
// each rank process (LibTorch's own CPU allocator keeps no statistics on
// 1.13, and its profiler memory reporting only sees the profiled thread):
// every tensor allocation, on any thread, adds to a live byte count whose
// maximum is tracked. "peak" = steady-state bytes + the most the live count
// rose above its value at the start of a step, so it includes what only
// lives within a step: gathered unit buffers, full gradients waiting for
// their reduce-scatter, buckets, activations and temporaries; it is printed
// per phase (forward, backward, optimizer), and the activations apart (how
// far the count had risen when the forward pass returned), since the ZeRO
// memory goal is about model state only. Gradient buckets that the reducer makes
// in shared memory (Communicator::reduce_scatter_buffer, on one machine)
// bypass the allocator: the bytes the communicator keeps reserved for them
// are added to "all tensors", and the most of them in use at once within a
// step to the peak (as if both peaks coincided: an upper bound). Max RSS (getrusage) was not used:
// glibc keeps freed blocks (tune_malloc_for_training keeps them on purpose),
// so RSS tells the high-water mark of the heap, not of live tensors, and
// every stage would need a process of its own.
//
// Step time is split into forward, backward (Accelerator::backward, with
// the gradient collectives it waits for) and optimizer (step + zero_grad).
// The reducer's statistics tell how much of the gradient collectives'
// in-flight time was hidden behind backward; stage 3's prefetched gathers
// have no statistics, so their hidden share is estimated (see run_rank).
//
// --memory_limit_mb M runs a different demonstration instead: a model
// whose stage-0 training state does not fit in M MB per process but whose
// stage-3 state does, trained at stage 0 and then at stage 3 by fresh
// processes whose address space is limited (RLIMIT_AS) to their baseline
// plus M MB; it prints how each ended.
//
// --gpt tiny|small trains the GPT example's model instead (its blocks are
// the units; its embeddings and final LayerNorm stay whole at stage 3, so
// the stage-3 formula becomes 16Ψu/N + 4Ψr + 12Ψr/N, Ψr the parameters
// outside the units).
//
// --backward_prefetch NO_PREFETCH|BACKWARD_PRE runs stage 3 from an FSDP 1
// plugin (FULL_SHARD, the blocks as units, forward_prefetch as the backward
// one) instead of DeepSpeed's, which always prefetches: NO_PREFETCH keeps one
// unit whole at a time in backward.
//
// Usage: zero_training_bench [--ranks 2,4] [--depth 8] [--width 512] [--gpt small]
//          [--batch 32] [--steps 20] [--stages 0,1,2,3] [--backward_prefetch NO_PREFETCH]
//        zero_training_bench --memory_limit_mb 256 [--ranks 2] [--depth 16]
//          [--batch 32] [--steps 3]
#include <dlfcn.h>
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <new>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "accelerate/accelerator.h"
#include "accelerate/malloc_tuning.h"
#include "accelerate/unit_forward.h"
#include "compat/memory_compat.h"
#include "support/forked_ranks.h"
#include "zero/block_stack.h"
#if ACCELERATE_BENCH_HAS_GPT
#include "gpt_model.h"
#include "parallel/sharded_gradients.h"
#endif

namespace {

using bench::BlockStack;
using Clock = std::chrono::steady_clock;

struct Settings {
  std::vector<int> ranks = {2, 4};
  std::vector<int> stages = {0, 1, 2, 3};
  int depth = 8;
  int width = 512;
  int batch = 32;
  int steps = 20;
  double memory_limit_mb = 0;     // > 0: the memory-limit demonstration
  std::string gpt_preset;         // "tiny"/"small": the GPT example's model instead of blocks
  std::string backward_prefetch;  // "": DeepSpeed's stage 3; else FSDP 1's with this policy
};

std::vector<int> int_list(const std::string& value) {
  std::vector<int> items;
  std::stringstream list(value);
  for (std::string item; std::getline(list, item, ',');) items.push_back(std::stoi(item));
  return items;
}

Settings parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
    const std::string value = argv[i + 1];
    if (flag == "--ranks") {
      s.ranks = int_list(value);
    } else if (flag == "--stages") {
      s.stages = int_list(value);
      for (int stage : s.stages) {
        if (stage < 0 || stage > 3) throw std::invalid_argument("stages are 0 to 3");
      }
    } else if (flag == "--depth") {
      s.depth = std::stoi(value);
    } else if (flag == "--width") {
      s.width = std::stoi(value);
    } else if (flag == "--batch") {
      s.batch = std::stoi(value);
    } else if (flag == "--steps") {
      s.steps = std::stoi(value);
    } else if (flag == "--memory_limit_mb") {
      s.memory_limit_mb = std::stod(value);
    } else if (flag == "--backward_prefetch") {
      if (value != "NO_PREFETCH" && value != "BACKWARD_PRE") {
        throw std::invalid_argument("--backward_prefetch is NO_PREFETCH or BACKWARD_PRE");
      }
      s.backward_prefetch = value;
    } else if (flag == "--gpt") {
#if ACCELERATE_BENCH_HAS_GPT
      s.gpt_preset = value;
#else
      throw std::invalid_argument("--gpt needs the GPT example (built without examples)");
#endif
    } else {
      throw std::invalid_argument("unknown flag " + flag);
    }
  }
  if (s.ranks.empty() || s.stages.empty() || s.steps < 1 || s.depth < 1 || s.width < 1)
    throw std::invalid_argument("--ranks, --stages, --steps, --depth and --width need values");
  return s;
}

// ---------------------------------------------------------------------------
// The model

// What a run trains: the model, the loss of its (fixed) batch, and its
// parameter counts: Ψ, those outside every unit (whole at stage 3, as at
// stage 2) and the largest unit's.
struct Workload {
  std::shared_ptr<torch::nn::Module> module;
  std::function<at::Tensor()> loss;
  double psi = 0, root = 0, unit = 0;
  int units = 0;
  std::string describe;
};

double count(const std::vector<at::Tensor>& parameters) {
  double n = 0;
  for (const auto& p : parameters) n += static_cast<double>(p.numel());
  return n;
}

BlockStack make_model(int depth, int width);
double parameters_of_block(int width);

Workload make_workload(const Settings& s, int rank) {
  Workload w;
  auto generator = at::detail::createCPUGenerator(100 + rank);
#if ACCELERATE_BENCH_HAS_GPT
  if (!s.gpt_preset.empty()) {
    // The GPT example's model: its blocks are the units; the token and
    // position embeddings (the first tied to the head) and the final
    // LayerNorm stay whole.
    torch::manual_seed(3);
    const gpt::GptConfig config = gpt::GptConfig::preset(s.gpt_preset, 4096);
    gpt::Gpt model(config);
    const at::Tensor tokens =
        at::randint(config.vocab_size, {s.batch, config.n_positions}, generator);
    const at::Tensor targets = tokens.roll(-1, 1);
    w.module = model.ptr();
    w.loss = [model, tokens, targets]() mutable { return model->loss(tokens, targets); };
    w.psi = count(model->parameters());
    w.unit = count(model->blocks.front()->parameters());
    w.units = static_cast<int>(model->blocks.size());
    w.root = w.psi - w.units * w.unit;
    char text[200];
    std::snprintf(text, sizeof text, "GPT %s (%lld blocks, n_embd %lld, vocab 4096, context %lld)",
                  s.gpt_preset.c_str(), static_cast<long long>(config.n_layer),
                  static_cast<long long>(config.n_embd),
                  static_cast<long long>(config.n_positions));
    w.describe = text;
    return w;
  }
#endif
  BlockStack model = make_model(s.depth, s.width);
  const at::Tensor x = at::randn({s.batch, s.width}, generator);
  w.module = model.ptr();
  w.loss = [model, x]() mutable { return model->forward(x).pow(2).mean(); };
  w.unit = parameters_of_block(s.width);
  w.units = s.depth;
  w.psi = s.depth * w.unit;
  char text[120];
  std::snprintf(text, sizeof text, "%d blocks x 2 Linear(%d, %d)", s.depth, s.width, s.width);
  w.describe = text;
  return w;
}

BlockStack make_model(int depth, int width) {
  torch::manual_seed(3);
  return BlockStack(depth, width);
}

double parameters_of_block(int width) { return 2.0 * (double(width) * width + width); }

// One BLAS thread per process, as `accelerate launch` gives each rank
// (OPENBLAS_NUM_THREADS=1, src/launcher/child_environment.cpp): Debian's
// LibTorch uses the pthread build of OpenBLAS, whose own pool ignores
// torch::set_num_threads and would put a second pool on the same cores.
// OpenBLAS read OPENBLAS_NUM_THREADS when it was loaded, before main, so
// its own function is called instead (when the BLAS is OpenBLAS). Under an
// address-space limit the pool matters more: a pool thread that cannot map
// its 128 MB work buffer left the caller spinning in sched_yield forever.
void one_blas_thread() {
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    set(1);
}

// ---------------------------------------------------------------------------
// Counting every CPU tensor allocation

// Through the compat layer (src/compat/memory_compat.h): LibTorch's
// allocator interface differs between generations. Installed once per rank
// process before any model exists, so every parameter, gradient, optimizer
// state, bucket and activation is counted (and stage 3's re-gather, which
// asks the storage's own allocator).
void install_counting_allocator() { accelerate::compat::install_cpu_allocation_counter(); }
void reset_peak() { accelerate::compat::reset_cpu_peak_bytes(); }

// ---------------------------------------------------------------------------
// One stage

// Bytes of the distinct storages behind `tensors`.
struct StorageCounter {
  std::set<const void*> seen;
  double bytes = 0;
  void add(const at::Tensor& tensor) {
    if (!tensor.defined()) return;
    const void* key = tensor.storage().data();
    if (key == nullptr || !seen.insert(key).second) return;  // released, or counted
    bytes += static_cast<double>(tensor.storage().nbytes());
  }
};

struct Measured {
  double state_bytes = 0;  // parameters + gradients + optimizer state
  // Every tensor byte the process holds between steps (the input batch and
  // anything the library keeps besides the state, e.g. reusable buffers).
  double live_bytes = 0;
  // The most the live bytes rose above their value at the step's start
  // during the forward pass, the backward pass and the optimizer step.
  double forward_peak_rise = 0;
  double backward_peak_rise = 0;
  double optimizer_peak_rise = 0;
  double activation_bytes = 0;  // the rise at the end of the forward pass
  // Gradient buckets made in shared memory (no allocator sees them): the
  // most in use at once within a step (Communicator::shared_buffer_usage).
  double shared_bytes = 0;
  // As if the shared buckets' peak coincided with the allocator's.
  double step_rise_bytes() const {
    return std::max({forward_peak_rise, backward_peak_rise, optimizer_peak_rise}) + shared_bytes;
  }
  double step_ms = 0;  // medians
  double forward_ms = 0;
  double backward_ms = 0;
  double optimizer_ms = 0;
  double reduce_in_flight_ms = 0;  // per step, averaged over the measured steps
  double reduce_exposed_ms = 0;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

accelerate::AcceleratorOptions stage_options(int stage, const std::string& backward_prefetch = "") {
  accelerate::AcceleratorOptions options;
  if (stage == 3 && !backward_prefetch.empty()) {
    const bool prefetch = backward_prefetch != "NO_PREFETCH";
    options.fsdp_plugin(accelerate::FullyShardedDataParallelPlugin()
                            .auto_wrap_policy(accelerate::FsdpAutoWrapPolicy::kTransformerBasedWrap)
                            .transformer_cls_names_to_wrap({"Block"})
                            .backward_prefetch(prefetch
                                                   ? accelerate::FsdpBackwardPrefetch::kBackwardPre
                                                   : accelerate::FsdpBackwardPrefetch::kNoPrefetch)
                            .forward_prefetch(prefetch));
    return options;
  }
  // Stage 0 is plain data parallelism, so the ZeRO runs do not clip either.
  if (stage > 0) {
    options.deepspeed_plugin(
        accelerate::DeepSpeedPlugin().zero_stage(stage).gradient_clipping(std::nullopt));
  }
  return options;
}

Measured run_stage(accelerate::Communicator& comm, std::shared_ptr<accelerate::Communicator> owner,
                   const Settings& s, int stage) {
  accelerate::Accelerator accelerator(owner, stage_options(stage, s.backward_prefetch));
  Workload workload = make_workload(s, comm.rank());
  torch::nn::Module& model = *workload.module;
  accelerate::Optimizer<torch::optim::AdamW> optimizer(model.parameters(),
                                                       torch::optim::AdamWOptions(1e-4));
  accelerator.prepare(model, optimizer);
  std::vector<double> step, forward, backward, optimizer_step;
  double in_flight = 0, exposed = 0;
  double rise[3] = {0, 0, 0}, activations = 0, shared_bytes = 0;
  for (int i = 0; i < s.steps + 2; ++i) {  // two warm-up steps
    comm.barrier();
    const std::int64_t start_bytes = accelerate::compat::cpu_live_bytes();
    reset_peak();
    comm.reset_shared_buffer_peak();
    const Clock::time_point start = Clock::now();
    at::Tensor loss = workload.loss();
    const Clock::time_point forwarded = Clock::now();
    const std::int64_t forward_bytes = accelerate::compat::cpu_live_bytes();
    const std::int64_t forward_peak = accelerate::compat::cpu_peak_bytes();
    reset_peak();
    accelerator.backward(loss);
    const Clock::time_point backwarded = Clock::now();
    const std::int64_t backward_peak = accelerate::compat::cpu_peak_bytes();
    reset_peak();
    optimizer.step();
    optimizer.zero_grad();
    const Clock::time_point end = Clock::now();
    const std::int64_t optimizer_peak = accelerate::compat::cpu_peak_bytes();
    loss = at::Tensor();
    if (i < 2) continue;
    using Ms = std::chrono::duration<double, std::milli>;
    step.push_back(Ms(end - start).count());
    forward.push_back(Ms(forwarded - start).count());
    backward.push_back(Ms(backwarded - forwarded).count());
    optimizer_step.push_back(Ms(end - backwarded).count());
    const std::int64_t peaks[3] = {forward_peak, backward_peak, optimizer_peak};
    for (int phase = 0; phase < 3; ++phase)
      rise[phase] = std::max(rise[phase], double(peaks[phase] - start_bytes));
    activations = std::max(activations, double(forward_bytes - start_bytes));
    shared_bytes = std::max(shared_bytes, double(comm.shared_buffer_usage().peak_in_use));
    for (const auto& reducer : accelerator.reducers()) {
      const accelerate::GradientSyncStats stats = reducer->last_step_stats();
      in_flight += stats.communication_seconds * 1e3 / s.steps;
      exposed += stats.exposed_wait_seconds * 1e3 / s.steps;
    }
  }
  const double live_bytes = static_cast<double>(accelerate::compat::cpu_live_bytes()) +
                            static_cast<double>(comm.shared_buffer_usage().reserved);
  StorageCounter counter;
  for (const auto& p : model.parameters()) {
    counter.add(p);
    counter.add(p.grad());
  }
  // What the optimizer steps: views of the model's buffers at stages 1 and
  // 2 (counted above), stage 3's shards, which are tensors of their own.
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      counter.add(p);
      counter.add(p.grad());
    }
  }
  for (const auto& reducer : accelerator.reducers()) {
    if (accelerate::detail::ShardedGradients::partition(*reducer) !=
        accelerate::GradientPartition::kSharded)
      continue;
    for (std::size_t b = 0; b < reducer->buckets().size(); ++b)
      counter.add(accelerate::detail::ShardedGradients::gradient_shard(*reducer, b));
  }
  for (const auto& entry : optimizer.state()) {
    // AdamW's state: exp_avg and exp_avg_sq (max_exp_avg_sq only with amsgrad).
    auto& state = static_cast<torch::optim::AdamWParamState&>(*entry.second);
    counter.add(state.exp_avg());
    counter.add(state.exp_avg_sq());
    counter.add(state.max_exp_avg_sq());
  }
  // The slowest rank's (largest) of each.
  at::Tensor all = at::tensor(
      {counter.bytes, live_bytes, rise[0], rise[1], rise[2], activations, median(step),
       median(forward), median(backward), median(optimizer_step), in_flight, exposed, shared_bytes},
      at::kDouble);
  comm.all_reduce(all, accelerate::ReduceOp::kMax);
  const double* v = all.data_ptr<double>();
  return {v[0], v[1], v[2], v[3], v[4], v[5], v[12], v[6], v[7], v[8], v[9], v[10], v[11]};
}

// Median time of one unit's all-gather on its own, as stage 3 does it: a
// fresh buffer (stage 3 gives a freed buffer new memory) filled from every
// process's shard. The slowest rank's.
double unit_gather_ms(accelerate::Communicator& comm, double unit_numel) {
  const auto numel = static_cast<std::int64_t>(unit_numel);
  const at::Tensor shard = at::ones({numel / comm.world_size()});
  std::vector<double> times;
  for (int i = 0; i < 22; ++i) {
    comm.barrier();
    const Clock::time_point start = Clock::now();
    at::Tensor buffer = at::empty({numel});
    comm.all_gather_into(shard, buffer);
    if (i >= 2)
      times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  at::Tensor slowest = at::tensor({median(times)}, at::kDouble);
  comm.all_reduce(slowest, accelerate::ReduceOp::kMax);
  return slowest.item<double>();
}

void run_rank(accelerate::Communicator& comm, std::shared_ptr<accelerate::Communicator> owner,
              const Settings& s) {
  torch::set_num_threads(1);
  one_blas_thread();
  accelerate::tune_malloc_for_training();
  install_counting_allocator();
  const double n = comm.world_size();
  const Workload shape = make_workload(s, comm.rank());
  const double psi = shape.psi, root = shape.root;
  // A unit's gathered buffer: its parameters padded to N equal shards.
  const double unit_bytes = 4 * std::ceil(shape.unit / n) * n;
  // Stage 3 shards the units' parameters; what stays outside them is
  // whole, with its gradients and optimizer state sharded (stage 2's 4+12/N).
  const double stage3 = 16 * (psi - root) / n + 4 * root + 12 * root / n;
  const double formula[] = {16 * psi, 8 * psi + 8 * psi / n, 4 * psi + 12 * psi / n, stage3};
  const char* formula_name[] = {"16Ψ", "8Ψ+8Ψ/N", "4Ψ+12Ψ/N",
                                root > 0 ? "16Ψu/N+4Ψr+12Ψr/N" : "16Ψ/N"};
  const double goal3 = stage3 + 2 * unit_bytes;
  if (comm.rank() == 0) {
    std::printf(
        "ranks=%d  %s, Ψ = %.3fM parameters (outside units Ψr = %.3fM), a unit %.2f MB, batch "
        "%d, %d steps (+2 warm-up), fp32 AdamW\n",
        comm.world_size(), shape.describe.c_str(), psi / 1e6, root / 1e6, unit_bytes / 1e6, s.batch,
        s.steps);
    std::fflush(stdout);
  }
  const bool has_stage3 = std::count(s.stages.begin(), s.stages.end(), 3) > 0;
  const double gather_ms = has_stage3 ? unit_gather_ms(comm, unit_bytes / 4) : 0;
  std::map<int, Measured> done;
  for (int stage : s.stages) {
    const Measured m = run_stage(comm, owner, s, stage);
    done[stage] = m;
    if (comm.rank() != 0) continue;
    const double reference_ms = done.count(0) ? done[0].step_ms : m.step_ms;
    const double activations = m.activation_bytes;
    const double peak = m.state_bytes + m.step_rise_bytes();
    // "Ψ" takes two bytes and one column, so printf's widths would not align.
    std::printf(
        "ranks=%d stage %d  memory  state %8.2f MB  formula %8.2f MB = %s (%.3fx)  all tensors "
        "%8.2f MB  peak in step %8.2f MB: state +%.2f MB in forward, +%.2f in backward, +%.2f in "
        "optimizer (activations %.2f MB), + shared-memory buckets %.2f MB\n",
        comm.world_size(), stage, m.state_bytes / 1e6, formula[stage] / 1e6, formula_name[stage],
        m.state_bytes / formula[stage], m.live_bytes / 1e6, peak / 1e6, m.forward_peak_rise / 1e6,
        m.backward_peak_rise / 1e6, m.optimizer_peak_rise / 1e6, activations / 1e6,
        m.shared_bytes / 1e6);
    const double hidden =
        m.reduce_in_flight_ms > 0 ? 1 - m.reduce_exposed_ms / m.reduce_in_flight_ms : 0;
    std::printf(
        "ranks=%d stage %d  time    step %7.2f ms (%.2fx stage 0)  forward %7.2f  backward %7.2f  "
        "optimizer %7.2f ms  gradient collectives: in flight %.2f ms, exposed %.2f ms, "
        "%.0f%% hidden\n",
        comm.world_size(), stage, m.step_ms, m.step_ms / reference_ms, m.forward_ms, m.backward_ms,
        m.optimizer_ms, m.reduce_in_flight_ms, m.reduce_exposed_ms, 100 * hidden);
    if (stage == 3) {
      std::printf(
          "ranks=%d stage 3  goal    peak %.2f MB vs the formula + 2 units = %.2f MB (%.3fx); "
          "+ activations %.2f MB (%.3fx)\n",
          comm.world_size(), peak / 1e6, goal3 / 1e6, peak / goal3, (goal3 + activations) / 1e6,
          peak / (goal3 + activations));
      // Prefetching overlaps each unit's gather with the previous unit's
      // compute, and the library keeps no statistics of it, so the hidden
      // share is estimated: what the gathers would cost one after another
      // (a unit's all-gather timed alone, once per unit per pass) against
      // the extra time stage 3 takes over a stage with the same compute and
      // no gathers: stage 0 in the forward pass; stage 2 in the backward
      // pass, which also reduce-scatters (in buckets of 25 MB, not per
      // unit). Everything else stage 3 does more counts as exposed gather.
      const double serial = shape.units * gather_ms;
      const auto hidden_share = [&](double extra) {
        return 100 * std::clamp(1 - extra / serial, 0.0, 1.0);
      };
      std::printf(
          "ranks=%d stage 3  gathers one unit's all-gather alone %.2f ms, %d per pass = %.2f ms",
          comm.world_size(), gather_ms, shape.units, serial);
      if (done.count(0)) {
        const double extra = m.forward_ms - done[0].forward_ms;
        std::printf("; forward %+.2f ms over stage 0: %.0f%% hidden", extra, hidden_share(extra));
      }
      if (done.count(2)) {
        const double extra = m.backward_ms - done[2].backward_ms;
        std::printf("; backward %+.2f ms over stage 2: %.0f%% hidden", extra, hidden_share(extra));
      }
      std::printf("\n");
    }
    std::fflush(stdout);
  }
}

// ---------------------------------------------------------------------------
// The memory-limit demonstration

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
    accelerate::Accelerator accelerator(comm, stage_options(stage));
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
    accelerate::Accelerator accelerator(comm, stage_options(stage));
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

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
  try {
    settings = parse(argc, argv);
  } catch (const std::exception& error) {
    std::cerr << "zero_training_bench: " << error.what() << "\n";
    return 2;
  }
  if (settings.memory_limit_mb > 0) {
    // Each stage needs processes of its own (a failed allocation can leave a
    // rank anywhere, and the limit cannot be lifted for the next stage), so
    // this mode forks them itself.
    if (std::getenv("WORLD_SIZE") != nullptr) {
      std::cerr << "zero_training_bench: --memory_limit_mb forks its own processes; run it "
                   "without a launcher\n";
      return 2;
    }
    return run_memory_demo(settings);
  }
  return bench::run_forked_jobs(
      "zero-training-bench", settings.ranks, {true},
      [&](std::shared_ptr<accelerate::Communicator> comm) { run_rank(*comm, comm, settings); });
}
