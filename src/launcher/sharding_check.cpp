#include "launcher/sharding_check.h"

#include "common/settings.h"
#include "common/sharding_launch_settings.h"
#include "launcher/child_environment.h"
#include "launcher/launch_errors.h"
#include "sharding/plugin_from_environment.h"

namespace accelerate::launcher {
namespace {

// "--a, --b are ignored: <why>" for the flags of `names` given on the
// command line, or nothing.
void note_unused_flags(const LaunchOptions& options, const std::vector<std::string>& names,
                       const std::string& why, std::vector<std::string>& notes) {
  std::string flags;
  for (const std::string& name : names) {
    if (options.source_of(name) == OptionSource::kFlag) flags += (flags.empty() ? "--" : ", --") + name;
  }
  if (!flags.empty())
    notes.push_back(flags + (flags.find(',') == std::string::npos ? " is" : " are") +
                    " ignored: " + why);
}

// Where the job's mixed_precision was written, for an error about it.
std::string where_mixed_precision_came_from(const LaunchOptions& options, MixedPrecision precision) {
  const std::string value = to_string(precision);
  switch (options.source_of("mixed_precision")) {
    case OptionSource::kFlag: return "--mixed_precision " + value;
    case OptionSource::kConfigFile:
      return "mixed_precision: " + value + " in " + options.config_file.value_or("the config file");
    default: return std::string(settings::kMixedPrecision.variable()) + "=" + value + " in the environment";
  }
}

// fp16 autocast exists on CUDA only. A CPU job that would compute in fp16
// is refused here, naming the value that decided it (the flag, the config
// file, the variable, or the DeepSpeed file's fp16 section, as Hugging
// Face's own DeepSpeed templates ship it), instead of failing in every rank.
void refuse_fp16_on_cpu(const LaunchOptions& options, std::optional<MixedPrecision> asked,
                        const std::optional<sharding::DeepSpeedConfig>& file) {
  const MixedPrecision job = asked.value_or(MixedPrecision::kNo);
  const MixedPrecision computed = file ? sharding::resolve_mixed_precision(*file, job, nullptr) : job;
  if (computed != MixedPrecision::kFP16) return;
  const std::string decided = job == MixedPrecision::kFP16
                                  ? where_mixed_precision_came_from(options, job)
                                  : file->source + ": fp16.enabled true";
  const std::string cpu = !options.cpu ? "no GPU is visible on this machine"
                          : options.source_of("cpu") == OptionSource::kConfigFile
                              ? "the config file's use_cpu or distributed_type"
                              : "--cpu";
  throw UsageError(decided + " asks for fp16 mixed precision, which needs a CUDA device, but this job runs on "
                   "the CPU (" + cpu + "); use bf16 there" +
                   (job == MixedPrecision::kFP16 ? "" : " (set fp16.enabled to false or \"auto\")"));
}

}  // namespace

std::vector<std::string> check_sharded_training(const LaunchOptions& options,
                                                const Environment& launcher_environment, bool cpu_job) {
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
  // Rank 0's environment: the launcher's own, with what it writes for the
  // ranks (so an exported ACCELERATE_USE_DEEPSPEED counts too).
  const Environment env = build_child_environment(options, 0, launcher_environment, 1);
  try {
    std::optional<sharding::DeepSpeedConfig> file;
    const auto plugin = sharding::deepspeed_plugin_from_environment(env, nullptr, &file);
    const auto precision = settings::kMixedPrecision.read(env);
    if (plugin) {
      sharding::check_zero_stage(*plugin);  // the Accelerator's judgement, before any process starts
      // Accelerate refuses a --mixed_precision the JSON file's fp16/bf16 contradicts.
      if (file && precision) sharding::check_mixed_precision(*file, *precision);
    }
    if (cpu_job) {
      try {
        refuse_fp16_on_cpu(options, precision, plugin ? file : std::nullopt);
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
