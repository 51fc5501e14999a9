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

}  // namespace

std::vector<std::string> check_sharded_training(const LaunchOptions& options,
                                                const Environment& launcher_environment) {
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
    if (!plugin) return notes;
    sharding::check_zero_stage(*plugin);  // the Accelerator's judgement, before any process starts
    // Accelerate refuses a --mixed_precision the JSON file's fp16/bf16 contradicts.
    const auto precision = settings::kMixedPrecision.read(env);
    if (file && precision) sharding::check_mixed_precision(*file, *precision);
  } catch (const UsageError&) {
    throw;
  } catch (const ConfigError& error) {
    throw UsageError(error.what());
  }
  return notes;
}

}  // namespace accelerate::launcher
