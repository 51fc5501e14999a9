// get_logger: Accelerate's multi-process aware logger.
//
//   auto logger = accelerate::get_logger("train");
//   logger.info("starting");                                  // main process only
//   logger.info("my shard has 117 files", accelerate::LogOptions().main_process_only(false));
//   logger.info("loaded", accelerate::LogOptions().in_order(true));  // every rank, rank order
//
// Lines look like
//   [2026-11-22 08:51:34] INFO train: starting
//   [2026-11-22 08:51:34] INFO train [rank 1/4]: my shard has 117 files
// (the rank appears in multi-process runs). The level comes from
// ACCELERATE_LOG_LEVEL (DEBUG, INFO, WARNING, ERROR, CRITICAL; any case),
// else INFO -- Python's root logger hides INFO by default, but a C++ program
// has no logging.basicConfig() to turn it on, so INFO is shown.
#pragma once

#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "accelerate/common/arg.h"
#include "accelerate/common/environment.h"
#include "accelerate/common/job_state.h"
#include "accelerate/common/log_level.h"

namespace accelerate {

class Communicator;  // communicator.h

// Where log lines go (a named type so ACCELERATE_ARG's const T& works).
using LogStream = std::ostream*;

struct LoggerOptions {
  // Lines below this level are dropped. Unset: ACCELERATE_LOG_LEVEL, else INFO.
  ACCELERATE_ARG(std::optional<LogLevel>, level);
  // Which process this is. Unset: the communicator's job if there is one,
  // else the job described by the environment (RANK, WORLD_SIZE, ...).
  ACCELERATE_ARG(std::optional<JobState>, job);
  // Needed for in_order logging in multi-process runs (it uses barriers).
  ACCELERATE_ARG(std::shared_ptr<Communicator>, communicator);
  // Where lines go; nullptr: stderr (written unbuffered, one line at a time).
  ACCELERATE_ARG(LogStream, stream) = nullptr;
  // The environment read for the defaults above (tests pass a map).
  ACCELERATE_ARG(std::optional<Environment>, environment);
};

// Per-call options (Accelerate's main_process_only and in_order kwargs).
struct LogOptions {
  // Log on the main process only (rank 0).
  ACCELERATE_ARG(bool, main_process_only) = true;
  // Log on every process, one after the other in rank order. Collective:
  // every rank must make the call (with the same level settings), or the
  // others wait at the barrier until the job's timeout.
  ACCELERATE_ARG(bool, in_order) = false;
};

class Logger {
 public:
  // Throws ConfigError for a bad ACCELERATE_LOG_LEVEL or environment.
  explicit Logger(std::string name, LoggerOptions options = {});

  void log(LogLevel level, const std::string& message, const LogOptions& options = {}) const;
  void debug(const std::string& message, const LogOptions& options = {}) const {
    log(LogLevel::kDebug, message, options);
  }
  void info(const std::string& message, const LogOptions& options = {}) const {
    log(LogLevel::kInfo, message, options);
  }
  void warning(const std::string& message, const LogOptions& options = {}) const {
    log(LogLevel::kWarning, message, options);
  }
  void error(const std::string& message, const LogOptions& options = {}) const {
    log(LogLevel::kError, message, options);
  }
  void critical(const std::string& message, const LogOptions& options = {}) const {
    log(LogLevel::kCritical, message, options);
  }

  bool is_enabled_for(LogLevel level) const { return level >= level_; }
  LogLevel level() const { return level_; }
  void set_level(LogLevel level) { level_ = level; }
  const std::string& name() const { return name_; }
  const JobState& job() const { return job_; }

  // The line log() writes, without the trailing newline (for tests).
  std::string format(LogLevel level, const std::string& message) const;

 private:
  void write(LogLevel level, const std::string& message) const;

  std::string name_;
  LogLevel level_;
  JobState job_;
  std::shared_ptr<Communicator> communicator_;
  std::ostream* stream_;
};

// Accelerate's get_logger(name, log_level=None).
Logger get_logger(const std::string& name, LoggerOptions options = {});

}  // namespace accelerate
