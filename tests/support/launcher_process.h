// The `accelerate` executable as a child of the test. Targets that include
// this define ACCELERATE_CLI_PATH (see tests/launcher/CMakeLists.txt).
#pragma once

#include <string>
#include <vector>

#include "support/process_runner.h"

namespace accelerate::testing {

inline std::vector<std::string> launcher_argv(const std::vector<std::string>& args) {
  std::vector<std::string> argv{ACCELERATE_CLI_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

class LauncherProcess : public ChildProcess {
 public:
  explicit LauncherProcess(const std::vector<std::string>& args,
                           const EnvironmentChanges& changes = {})
      : ChildProcess(launcher_argv(args), changes) {}
};

inline RunResult run_launcher(const std::vector<std::string>& args,
                              const ChildProcess::EnvironmentChanges& changes = {},
                              std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  return run_program(launcher_argv(args), changes, timeout);
}

}  // namespace accelerate::testing
