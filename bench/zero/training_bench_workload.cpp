// zero_training_bench's settings, the model it trains and the Accelerator
// options of each stage.
#include <dlfcn.h>

#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "accelerate/common/environment.h"
#include "accelerate/distributed/parallelism_config.h"
#include "accelerate/sharding/fsdp_plugin.h"
#include "support/flag_pairs.h"
#include "zero/training_bench.h"
#if ACCELERATE_BENCH_HAS_GPT
#include "presets.h"
#endif

namespace zero_training_bench {

namespace {

std::vector<int> int_list(const std::string& value) {
  std::vector<int> items;
  for (const std::string& item : bench::comma_items(value)) items.push_back(std::stoi(item));
  return items;
}

constexpr struct {
  Offload value;
  const char* name;
} kOffloadNames[] = {{Offload::kNone, "none"},
                     {Offload::kOptimizer, "optimizer"},
                     {Offload::kParam, "param"},
                     {Offload::kBoth, "both"}};

Offload offload_from(const std::string& value) {
  for (const auto& entry : kOffloadNames) {
    if (value == entry.name) return entry.value;
  }
  throw std::invalid_argument("--offload is none, optimizer, param or both, got '" + value + "'");
}

// The combinations a run cannot make, each refused with one line.
void check_combinations(const Settings& s) {
  if (s.memory_limit_mb > 0 && s.reports_placement())
    throw std::invalid_argument("--memory_limit_mb runs without --offload and --hybrid");
  if (!s.backward_prefetch.empty() && s.reports_placement())
    throw std::invalid_argument("--backward_prefetch runs without --offload and --hybrid");
  if (s.hybrid == 0) return;
  for (int n : s.ranks) {
    if (s.hybrid < 2 || s.hybrid >= n || n % s.hybrid != 0) {
      throw std::invalid_argument(
          "--hybrid G needs 1 < G < N with G dividing N for every --ranks N");
    }
  }
  // FSDP has a hybrid strategy for stages 3 and 2 only, and offloads both
  // parts at once (cpu_offload).
  for (int stage : s.stages) {
    if (stage == 1)
      throw std::invalid_argument("--hybrid runs stages 0, 2 and 3 (FSDP has no 1): pass --stages");
  }
  if (s.offload != Offload::kNone && s.offload != Offload::kBoth)
    throw std::invalid_argument("--hybrid offloads through FSDP's cpu_offload: --offload both");
}

}  // namespace

const char* offload_name(Offload offload) {
  for (const auto& entry : kOffloadNames) {
    if (offload == entry.value) return entry.name;
  }
  return "?";
}

Settings parse(int argc, char** argv) {
  Settings s;
  for (const auto& [flag, value] : bench::flag_pairs(argc, argv)) {
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
    } else if (flag == "--offload") {
      s.offload = offload_from(value);
    } else if (flag == "--hybrid") {
      s.hybrid = std::stoi(value);
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
  check_combinations(s);
  return s;
}

namespace {

double count(const std::vector<at::Tensor>& parameters) {
  double n = 0;
  for (const auto& p : parameters) n += static_cast<double>(p.numel());
  return n;
}

}  // namespace

Workload make_workload(const Settings& s, int rank) {
  Workload w;
  auto generator = at::detail::createCPUGenerator(100 + rank);
#if ACCELERATE_BENCH_HAS_GPT
  if (!s.gpt_preset.empty()) {
    // The GPT example's model: its blocks are the units; the token and
    // position embeddings (the first tied to the head) and the final
    // LayerNorm stay whole.
    torch::manual_seed(3);
    const auto config = gpt::preset_config(s.gpt_preset, 4096);
    gpt::Gpt model(config);
    auto blocks = model->transformer->h;
    const at::Tensor tokens =
        at::randint(config.vocab_size, {s.batch, config.n_positions}, generator);
    const at::Tensor targets = tokens.roll(-1, 1);
    w.module = model.ptr();
    w.loss = [model, tokens, targets]() mutable {
      return model->loss_on_shifted_labels(tokens, targets);
    };
    w.psi = count(model->parameters());
    w.unit = count(blocks[0]->parameters());
    w.units = static_cast<int>(blocks->size());
    w.root = w.psi - w.units * w.unit;
    for (const auto& block : *blocks) w.unit_modules.push_back(block.get());
    char text[200];
    std::snprintf(text, sizeof text, "GPT %s (%lld blocks, n_embd %lld, vocab 4096, context %lld)",
                  s.gpt_preset.c_str(), static_cast<long long>(config.n_layer),
                  static_cast<long long>(config.n_embd),
                  static_cast<long long>(config.n_positions));
    w.describe = text;
    return w;
  }
#endif
  bench::BlockStack model = make_model(s.depth, s.width);
  const at::Tensor x = at::randn({s.batch, s.width}, generator);
  w.module = model.ptr();
  w.loss = [model, x]() mutable { return model->forward(x).pow(2).mean(); };
  w.unit = parameters_of_block(s.width);
  w.units = s.depth;
  w.psi = s.depth * w.unit;
  for (auto& block : model->list) w.unit_modules.push_back(block.get());
  char text[120];
  std::snprintf(text, sizeof text, "%d blocks x 2 Linear(%d, %d)", s.depth, s.width, s.width);
  w.describe = text;
  return w;
}

bench::BlockStack make_model(int depth, int width) {
  torch::manual_seed(3);
  return bench::BlockStack(depth, width);
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

accelerate::AcceleratorOptions stage_options(int stage, const Settings& s, int world_size) {
  accelerate::AcceleratorOptions options;
  // Stage 0 is plain data parallelism: the reference, never offloaded.
  if (stage == 0) return options;
  if (s.offload != Offload::kNone) {
    // On a CPU-only job offloading is a no-op unless this setting asks for
    // its copies anyway (docs/sharding.md, "CPU offloading"); a value the
    // caller set wins, so the no-op can be measured too.
    accelerate::Environment env = accelerate::current_environment();
    env.emplace("ACCELERATE_OFFLOAD_ON_CPU_JOB", "true");
    options.environment(env);
  }
  if (s.hybrid > 0) {
    options.fsdp_plugin(
        accelerate::FullyShardedDataParallelPlugin()
            .sharding_strategy(stage == 3 ? accelerate::FsdpShardingStrategy::kHybridShard
                                          : accelerate::FsdpShardingStrategy::kHybridShardZero2)
            .auto_wrap_policy(accelerate::FsdpAutoWrapPolicy::kTransformerBasedWrap)
            .transformer_cls_names_to_wrap({"Block"})
            .cpu_offload(s.offload == Offload::kBoth));
    options.parallelism_config(
        accelerate::ParallelismConfig().dp_shard_size(s.hybrid).dp_replicate_size(world_size /
                                                                                  s.hybrid));
    return options;
  }
  if (stage == 3 && !s.backward_prefetch.empty()) {
    const bool prefetch = s.backward_prefetch != "NO_PREFETCH";
    options.fsdp_plugin(accelerate::FullyShardedDataParallelPlugin()
                            .auto_wrap_policy(accelerate::FsdpAutoWrapPolicy::kTransformerBasedWrap)
                            .transformer_cls_names_to_wrap({"Block"})
                            .backward_prefetch(prefetch
                                                   ? accelerate::FsdpBackwardPrefetch::kBackwardPre
                                                   : accelerate::FsdpBackwardPrefetch::kNoPrefetch)
                            .forward_prefetch(prefetch));
    return options;
  }
  // The ZeRO runs do not clip either, as stage 0 does not.
  accelerate::DeepSpeedPlugin plugin =
      accelerate::DeepSpeedPlugin().zero_stage(stage).gradient_clipping(std::nullopt);
  const bool optimizer = s.offload == Offload::kOptimizer || s.offload == Offload::kBoth;
  const bool param = s.offload == Offload::kParam || s.offload == Offload::kBoth;
  if (optimizer) plugin.offload_optimizer_device(accelerate::OffloadDevice::kCpu);
  if (param) plugin.offload_param_device(accelerate::OffloadDevice::kCpu);
  options.deepspeed_plugin(plugin);
  return options;
}

}  // namespace zero_training_bench
