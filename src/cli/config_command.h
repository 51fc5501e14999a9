// `accelerate config [default|update] [--config_file PATH] [...]`. Every
// error becomes one stderr line "accelerate config: error: ..." and an exit
// code (2 for usage, 1 when the file cannot be read or written).
#pragma once

#include <string>
#include <vector>

namespace accelerate::cli {

// `args` are the arguments after "config". Returns the process exit code.
int run_config_command(const std::vector<std::string>& args);

}  // namespace accelerate::cli
