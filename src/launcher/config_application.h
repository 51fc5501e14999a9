// `accelerate launch --config_file`: the values of a loaded config file
// (src/config/config_file.h) become launch options, beside the Slurm
// defaults (slurm_defaults.h), the other layer under the flags.
//
// Precedence (docs/launching.md): flags > Slurm > config file > defaults. The
// file only fills options whose source is still OptionSource::kDefault, and
// marks them kConfigFile, so the effective-settings listing can say where
// each came from.
#pragma once

#include <string>
#include <vector>

#include "config/config_file.h"
#include "launcher/launch_options.h"

namespace accelerate::launcher {

// For every launch option whose source is still OptionSource::kDefault,
// stores the file's value through the flag table
// (find_launch_flag(name)->apply(options, "<file>:<line>: key '<key>'", value))
// and records OptionSource::kConfigFile. Throws what the flag rows throw
// (UsageError, prefixed with file, line and key) for a bad value. Returns
// notes for the user, one line each, e.g. "FILE:7: deepspeed_config is
// ignored: DeepSpeed is not supported by accelerate-cpp".
std::vector<std::string> apply_config_file(const config::ConfigFile& file, LaunchOptions& options);

}  // namespace accelerate::launcher
