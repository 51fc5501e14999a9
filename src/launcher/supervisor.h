// Runs the local ranks of a job and watches them until they are all gone:
// fork/exec each rank in its own process group, relay its output line by
// line, and when one rank fails or the launcher is asked to stop, stop every
// rank (SIGTERM, a grace period, then SIGKILL) so nothing is left running.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "launcher/program_resolution.h"

namespace accelerate::launcher {

// How long stopping ranks get to exit after SIGTERM (or the forwarded
// signal) before SIGKILL: enough to flush logs, short enough that a failed
// job frees its GPUs at once.
constexpr std::chrono::milliseconds kStopGracePeriod = std::chrono::seconds(5);

// How long output is still relayed after every rank has exited, for pipes a
// rank's background child keeps open.
constexpr std::chrono::milliseconds kDrainAfterExit = std::chrono::milliseconds(200);

struct RankLaunch {
  int global_rank = 0;
  std::vector<std::string> environment;  // "KEY=VALUE" entries
  std::string name;                      // in messages; "rank <global_rank>" when empty
  std::string stdout_log;                // files that also get the rank's output (--log_dir);
  std::string stderr_log;                // empty: none. Created or truncated at start.
};

struct SupervisorSettings {
  ResolvedCommand command;
  std::vector<RankLaunch> ranks;  // the local ranks, in local-rank order
  bool prefix_output = true;      // "[rank{R}]: " before every line
  // Erase the terminal's current line (a rank's progress bar) before each
  // batch of relayed lines, on stdout and on stderr.
  bool clear_stdout_line = false, clear_stderr_line = false;
  bool quiet = false;  // no informational lines
  std::chrono::milliseconds grace_period = kStopGracePeriod;
};

struct SupervisorResult {
  int exit_code = 0;
  // The launcher was asked to stop (SIGINT, SIGTERM, SIGHUP): no restart.
  bool stopped_by_signal = false;
};

// Runs the ranks to the end and returns the launcher's exit code: 0 when all
// succeed, the first failed rank's code (128+N for signal N), or 128+N when
// the launcher itself got signal N. Prints one line on stderr for a failure.
// Throws LaunchFailure, after stopping what it started, if a rank cannot be
// started at all (or a log file cannot be created).
SupervisorResult supervise(const SupervisorSettings& settings);
inline int run_supervisor(const SupervisorSettings& settings) {
  return supervise(settings).exit_code;
}

}  // namespace accelerate::launcher
