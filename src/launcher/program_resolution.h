// Turns PROGRAM into the exact argv the ranks exec, and checks it before any
// rank starts: a typo should cost one clear line, not N crashed ranks.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "accelerate/common/environment.h"
#include "launcher/launch_options.h"

namespace accelerate::launcher {

struct ResolvedCommand {
  std::string executable;         // path handed to execve
  std::vector<std::string> argv;  // argv[0] as the user would write it
};

// True when PROGRAM runs under python3: -m, or a .py file without --no_python.
bool runs_with_python(const LaunchOptions& options);

// The first executable regular file named `name` in the ':'-separated
// `path_variable` (the system default path when unset), or nullopt.
std::optional<std::string> find_on_path(const std::string& name,
                                        const std::optional<std::string>& path_variable);

// Resolves options.program (and python3 when needed). Throws LaunchFailure
// naming the program when it is missing or not executable.
ResolvedCommand resolve_command(const LaunchOptions& options, const Environment& environment);

}  // namespace accelerate::launcher
