#include "launcher/sharding_check.h"

#include "common/settings.h"
#include "common/sharding_launch_settings.h"
#include "launcher/child_environment.h"
#include "launcher/launch_errors.h"
#include "sharding/hpz_partition.h"
#include "sharding/parallelism_sizes.h"
#include "sharding/plugin_from_environment.h"

namespace accelerate::launcher {
namespace {

// "--a, --b are ignored: <why>" for the flags of `names` given on the
// command line, or nothing.
void note_unused_flags(const LaunchOptions& options, const std::vector<std::string>& names,
                       const std::string& why, std::vector<std::string>& notes) {
  std::string flags;
  for (const std::string& name : names) {
    if (options.source_of(name) == OptionSource::kFlag)
      flags += (flags.empty() ? "--" : ", --") + name;
  }
  if (!flags.empty())
    notes.push_back(flags + (flags.find(',') == std::string::npos ? " is" : " are") +
                    " ignored: " + why);
}

// fp16 autocast exists on CUDA only. A CPU job that would compute in fp16
// is refused here, naming the value that decided it (a flag, the config
// file's key and line, a variable, or the DeepSpeed file's fp16 section, as
// Hugging Face's own DeepSpeed templates ship it), instead of failing in
// every rank.
void refuse_fp16_on_cpu(const LaunchOptions& options, const settings::SettingValues& values,
                        const std::optional<sharding::DeepSpeedConfig>& file) {
  const MixedPrecision job = settings::kMixedPrecision.read_or_default(values);
  const MixedPrecision computed =
      file ? sharding::resolve_mixed_precision(*file, job, nullptr) : job;
  if (computed != MixedPrecision::kFP16) return;
  const std::string decided =
      job == MixedPrecision::kFP16
          ? settings::kMixedPrecision.origin(values)->describe(to_string(job))
          : file->source + ": fp16.enabled true";
  const std::string cpu =
      !options.cpu ? "no GPU is visible on this machine" : options.origin_of("cpu").subject();
  throw UsageError(
      decided +
      " asks for fp16 mixed precision, which needs a CUDA device, but this job runs on "
      "the CPU (" +
      cpu + "); use bf16 there" +
      (job == MixedPrecision::kFP16 ? "" : " (set fp16.enabled to false or \"auto\")"));
}

}  // namespace

std::vector<std::string> check_sharded_training(const LaunchOptions& options,
                                                const Environment& launcher_environment,
                                                bool cpu_job) {
  std::vector<std::string> notes;
  if (!options.use_deepspeed) {
    note_unused_flags(
        options, settings::sharding_setting_names("deepspeed_config"),
        "DeepSpeed is not in use (give --use_deepspeed, or distributed_type: DEEPSPEED in the "
        "config "
        "file)",
        notes);
  }
  if (!options.use_fsdp) {
    note_unused_flags(
        options, settings::sharding_setting_names("fsdp_config"),
        "FSDP is not in use (give --use_fsdp, or distributed_type: FSDP in the config file)",
        notes);
  }
  if (!options.use_parallelism_config) {
    note_unused_flags(options, settings::sharding_setting_names("parallelism_config"),
                      "the parallelism sizes are not in use (give --use_parallelism_config, or a "
                      "parallelism_config section in the config file)",
                      notes);
  }
  // What the ranks will read: the values this launch gives them, in front of
  // the launcher's own environment (so an exported ACCELERATE_USE_DEEPSPEED
  // counts too), each with where it was written.
  const settings::LayeredValues values = launch_setting_values(options, launcher_environment);
  try {
    std::optional<sharding::DeepSpeedConfig> file;
    const auto plugin = sharding::deepspeed_plugin_from_settings(values, nullptr, &file);
    // The parallelism sizes must fit the job (and FSDP must be in use to shard).
    const auto sizes = sharding::parallelism_sizes(values, options.num_processes,
                                                   settings::kUseFsdp.read_or_default(values));
    if (plugin) {
      // DeepSpeed's tensor_parallel.autotp_size must fit the job and the sizes.
      if (file) {
        sharding::tensor_parallel_size(sizes, file->autotp_size, file->source,
                                       options.num_processes);
      }
      // The Accelerator's judgement, before any process starts.
      sharding::check_zero_stage(*plugin);
      // ZeRO++ hpZ's groups must fit each machine (the ranks print the notes).
      sharding::hpz_partition_size(file, plugin->zero_stage(), options.num_processes,
                                   options.local_processes(), nullptr);
      // Accelerate refuses a --mixed_precision the JSON file's fp16/bf16 contradicts.
      if (auto precision = settings::kMixedPrecision.read(values); file && precision) {
        sharding::check_mixed_precision(*file, *precision);
      }
    }
    if (cpu_job) {
      try {
        refuse_fp16_on_cpu(options, values, plugin ? file : std::nullopt);
      } catch (const UsageError& refusal) {
        // A dry run shows what a launch would do, this refusal included.
        if (!options.dry_run) throw;
        notes.push_back(std::string(refusal.what()) + " (a launch stops here)");
      }
    }
  } catch (const UsageError&) {
    throw;
  } catch (const ConfigError& error) {
    throw UsageError(error.what());
  }
  return notes;
}

}  // namespace accelerate::launcher
