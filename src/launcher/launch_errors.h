// The two kinds of failure `accelerate launch` reports before or while it
// runs a job. main() turns each into one stderr line
// ("accelerate launch: error: ...") and an exit code, so nothing below the
// command line ever prints or exits on its own.
#pragma once

#include "accelerate/common/errors.h"

namespace accelerate::launcher {

// The command line is wrong (unknown flag, bad value, conflicting flags, a
// program or file it names that is missing or cannot be run). Exit code 2,
// like every POSIX tool's usage errors, and as every `accelerate` command
// reports the files it is given.
class UsageError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// The command line is fine but the job cannot start or run here: port
// taken, python3 missing, fork failed. Exit code 1.
class LaunchFailure : public Error {
 public:
  using Error::Error;
};

constexpr int kUsageExitCode = 2;
constexpr int kRuntimeExitCode = 1;

}  // namespace accelerate::launcher
