#include "launcher/child_environment.h"

#include <algorithm>
#include <utility>

#include "common/settings.h"
#include "launcher/program_resolution.h"

namespace accelerate::launcher {

namespace {

// Gives `setting` the value of the option `name` when it was given.
template <class T>
void give(settings::LayeredValues& values, const LaunchOptions& options, const char* name,
          const settings::Setting<T>& setting, const std::optional<T>& value) {
  if (value) values.set(setting.variable(), {setting.format(*value), options.origin_of(name)});
}

// Sharded training, in Accelerate's variables: those of the kind in use only
// (a DeepSpeed flag without DeepSpeed is ignored with a note at launch).
void give_sharding_settings(const LaunchOptions& o, settings::LayeredValues& values) {
  const std::optional<bool> yes(true);
  if (o.use_deepspeed) give(values, o, "use_deepspeed", settings::kUseDeepSpeed, yes);
  if (o.use_fsdp) give(values, o, "use_fsdp", settings::kUseFsdp, yes);
  if (o.use_parallelism_config) {
    give(values, o, "use_parallelism_config", settings::kUseParallelismConfig, yes);
  }
  const auto in_use = [&](const std::string& section) {
    if (section == "parallelism_config") return o.use_parallelism_config;
    return section == "deepspeed_config" ? o.use_deepspeed : o.use_fsdp;
  };
#define ACCELERATE_GIVE_SETTING(section, name, Type, setting, metavar, yaml) \
  if (in_use(#section)) give(values, o, #name, settings::setting, o.name);
  ACCELERATE_SHARDING_LAUNCH_SETTINGS(ACCELERATE_GIVE_SETTING)
#undef ACCELERATE_GIVE_SETTING
}

}  // namespace

settings::LayeredValues launch_setting_values(const LaunchOptions& options,
                                              const Environment& launcher_environment) {
  settings::LayeredValues values(launcher_environment);
  // Settings are given only when the user chose them, so a value exported
  // in the launcher's shell still reaches the program otherwise.
  const std::optional<bool> yes(true);
  if (options.cpu) give(values, options, "cpu", settings::kUseCpu, yes);
  if (options.debug) give(values, options, "debug", settings::kDebugMode, yes);
  give(values, options, "mixed_precision", settings::kMixedPrecision, options.mixed_precision);
  if (options.rdzv_conf) {
    if (auto timeout = rdzv_timeout_seconds("--rdzv_conf", *options.rdzv_conf)) {
      give(values, options, "rdzv_conf", settings::kTimeout,
           std::optional(settings::kTimeout.parse("--rdzv_conf timeout", *timeout)));
    }
  }
  give(values, options, "gradient_accumulation_steps", settings::kGradientAccumulationSteps,
       options.gradient_accumulation_steps);
  give_sharding_settings(options, values);
  return values;
}

int global_rank(const LaunchOptions& options, int local_rank) {
  return options.machine_rank * options.local_processes() + local_rank;
}

int default_threads_per_process(int usable_cores, int num_processes) {
  return std::max(1, usable_cores / std::max(1, num_processes));
}

Environment build_child_environment(const LaunchOptions& options, int local_rank,
                                    const Environment& launcher_environment, int usable_cores,
                                    int restart_count,
                                    const std::optional<std::string>& openblas_coretype) {
  Environment env = launcher_environment;
  const int world_size = options.num_processes;
  const std::string rank = std::to_string(global_rank(options, local_rank));

  // torchrun's names, so programs written for torchrun (and the library's
  // JobState) find their place in the job without knowing who launched them.
  // With a single role, the role rank and size equal the global ones.
  env["RANK"] = rank;
  env["LOCAL_RANK"] = std::to_string(local_rank);
  env["WORLD_SIZE"] = std::to_string(world_size);
  env["LOCAL_WORLD_SIZE"] = std::to_string(options.local_processes());
  env["GROUP_RANK"] = std::to_string(options.machine_rank);
  env["GROUP_WORLD_SIZE"] = std::to_string(options.num_machines);
  env["ROLE_RANK"] = rank;
  env["ROLE_WORLD_SIZE"] = std::to_string(world_size);
  env["MASTER_ADDR"] = options.main_process_ip;
  env["MASTER_PORT"] = std::to_string(options.main_process_port);
  // How many times the local group was restarted (--max_restarts), under
  // torchrun's name and ours: a program resumes from its checkpoint when > 0.
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(restart_count);
  settings::kRestartCount.write(env, restart_count);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(options.max_restarts);

  launch_setting_values(options, launcher_environment).write_to(env);
  // "all" means every GPU the launcher itself sees: the variable is left as it is.
  if (options.gpu_ids && *options.gpu_ids != "all") {
    env["CUDA_VISIBLE_DEVICES"] = *options.gpu_ids;
    // HIP (ROCm) reads CUDA_VISIBLE_DEVICES only when HIP_VISIBLE_DEVICES is
    // empty or unset, so an inherited HIP list would silently win over the
    // flag. Both number the GPUs that ROCR_VISIBLE_DEVICES left, so the same
    // indices apply.
    if (lookup(env, "HIP_VISIBLE_DEVICES")) env["HIP_VISIBLE_DEVICES"] = *options.gpu_ids;
  }

  // Threads (docs/launching.md, "Threads"). LibTorch's OpenMP pool gets the
  // rank's share of the cores, and OpenBLAS 1 thread: Debian's LibTorch links
  // the pthread build of OpenBLAS, whose pool is a second one on the same
  // cores and busy-waits after every call, which made training slower than
  // on one thread (docs/performance.md, "Threads on LibTorch 1.13 and 2.6").
  // The flag is an explicit request and wins; otherwise a value the user
  // exported is kept, each variable on its own.
  const int omp_threads = options.num_cpu_threads_per_process.value_or(
      default_threads_per_process(usable_cores, options.local_processes()));
  const std::pair<const settings::Setting<int>*, int> thread_counts[] = {
      {&settings::kOmpNumThreads, omp_threads},
      {&settings::kOpenblasNumThreads, settings::kOpenblasNumThreads.fallback}};
  for (const auto& [threads, count] : thread_counts) {
    if (options.num_cpu_threads_per_process || !lookup(launcher_environment, threads->variable())) {
      threads->write(env, count);
    }
  }
  // OpenMP's idle threads sleep instead of spinning for a core that another
  // thread (of this rank, another rank or another job) needs; a policy the
  // user exported is kept.
  if (!lookup(launcher_environment, settings::kOmpWaitPolicy.variable())) {
    settings::kOmpWaitPolicy.write(env, settings::kOmpWaitPolicy.fallback);
  }
  // OpenBLAS's idle workers likewise (its pthreads build, Debian's): by
  // default each spins ~0.1 s after every call (2^28 cycles), through the
  // OpenMP regions that follow, so where the user gives OpenBLAS more than
  // one thread, LibTorch's threads share their cores with it (GPT small on
  // 1 process with 2 threads each: +10% tokens/s with 4; docs/launching.md,
  // "Threads"). With 1 thread OpenBLAS has no worker and the value changes
  // nothing. A value the user exported is kept.
  if (!lookup(launcher_environment, settings::kOpenblasThreadTimeout.variable())) {
    settings::kOpenblasThreadTimeout.write(env, settings::kOpenblasThreadTimeout.fallback);
  }
  // OpenBLAS's kernels for a CPU its detection does not know (it fell back
  // to generic ones): the variable is read when OpenBLAS loads, so only the
  // launcher can set it for the ranks. A core the user exported is kept.
  if (openblas_coretype && !lookup(launcher_environment, settings::kOpenblasCoretype.variable())) {
    settings::kOpenblasCoretype.write(env, *openblas_coretype);
  }
  // Python buffers stdout in blocks when it is a pipe (ours), so progress
  // lines would show up minutes late; ask for unbuffered output unless the
  // user decided otherwise.
  if (runs_with_python(options) && !lookup(launcher_environment, "PYTHONUNBUFFERED")) {
    env["PYTHONUNBUFFERED"] = "1";
  }
  return env;
}

std::vector<std::string> to_envp_strings(const Environment& environment) {
  std::vector<std::string> entries;
  entries.reserve(environment.size());
  for (const auto& [key, value] : environment) entries.push_back(key + "=" + value);
  return entries;
}

}  // namespace accelerate::launcher
