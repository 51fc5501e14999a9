// The two kinds of failure `accelerate launch` reports before or while it
// runs a job. main() turns each into one stderr line
// ("accelerate launch: error: ...") and an exit code, so nothing below the
// command line ever prints or exits on its own.
#pragma once

#include "accelerate/common/errors.h"

namespace accelerate::launcher {

// The command line is wrong (unknown flag, bad value, conflicting flags).
// Exit code 2, like every POSIX tool's usage errors.
class UsageError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// The command line is fine but the job cannot start or run here: program
// missing, port taken, fork failed. Exit code 1.
class LaunchFailure : public Error {
 public:
  using Error::Error;
};

constexpr int kUsageExitCode = 2;
constexpr int kRuntimeExitCode = 1;

}  // namespace accelerate::launcher
