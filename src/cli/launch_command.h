// `accelerate launch`: from the command line to a finished job. Every error
// becomes one stderr line "accelerate launch: error: ..." and an exit code
// (2 for usage: bad flags or a config file that cannot be used; 1 for runtime
// problems); nothing here calls exit(). The work itself is the launcher's
// (src/launcher/).
#pragma once

#include <string>
#include <vector>

namespace accelerate::cli {

// `args` are the arguments after "launch". Returns the process exit code.
int run_launch_command(const std::vector<std::string>& args);

}  // namespace accelerate::cli
