// Building and writing whole config files: `accelerate config default`
// (a basic file, no questions) and `accelerate config update` (an existing
// file rewritten with today's keys, its values kept).
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include "accelerate/common/environment.h"

namespace accelerate::config {

// $HOME, else the password database's home folder: what "~" means.
std::string home_directory(const Environment& env);

// What `accelerate config default` writes on a machine with `gpus` NVIDIA
// GPUs: Accelerate's write_basic_config (several GPUs: MULTI_GPU with one
// process each; one GPU: NO; none: NO on the CPU).
YAML::Node default_config_node(const std::string& mixed_precision, int gpus);

// `text` (the file at `path`) checked like load_config_file (so it throws the
// same ConfigFileError), then brought to the current format: old spellings
// translated (fp16, dynamo_backend, an unquoted NO), missing keys filled with
// the values that change nothing, null values and empty sections dropped as
// Accelerate does; every other value and section kept.
YAML::Node updated_config_node(const std::string& text, const std::string& path);

// Writes `root` as YAML (Accelerate's style; JSON when `path` ends in
// ".json", which Accelerate parses as JSON) to `path`, creating its folder;
// the file is replaced atomically, so a crash never leaves half a config.
// Throws accelerate::Error naming the path when it cannot.
void write_config_file(const std::string& path, const YAML::Node& root);

}  // namespace accelerate::config
