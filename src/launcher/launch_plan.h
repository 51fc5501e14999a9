// What one attempt of `accelerate launch` starts: the command and, for each
// local process, its environment and log files. Built the same way for a
// real run and for --dry_run, so the dry run prints exactly what would run.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "accelerate/common/environment.h"
#include "launcher/launch_options.h"
#include "launcher/mpirun_command.h"
#include "launcher/supervisor.h"

namespace accelerate::launcher {

struct PlanInputs {
  const LaunchOptions* options = nullptr;  // resolved, with a concrete port
  ResolvedCommand program;                 // PROGRAM as resolve_command() found it
  Environment environment;                 // the launcher's, plus GLOO_SOCKET_IFNAME if chosen
  int usable_cores = 1;
  // OPENBLAS_CORETYPE for the ranks, when the launcher chose one (prepare()).
  std::optional<std::string> openblas_coretype;
  // Set with --mpirun_hostfile: mpirun's path and the file's facts.
  std::optional<std::string> mpirun_path;
  Hostfile hostfile;
  bool as_root = false;
  // The local main process draws its progress bars on our terminal
  // (ACCELERATE_PROGRESS_TTY, in `environment`): lines relayed to that
  // terminal, on stdout and on stderr, clear the bar's line first.
  bool clear_stdout_line = false, clear_stderr_line = false;
};

// The supervisor settings of attempt `restart_count` (0 first). Log file
// paths follow docs/launching.md: LOG_DIR/attempt_<k>/rank_<R>/stdout.log
// (and stderr.log); `mpirun` instead of rank_<R> under mpirun. Creates no
// folders: prepare_log_folders() does.
SupervisorSettings plan_attempt(const PlanInputs& inputs, int restart_count);

// Creates the folders of the attempt's log files. Throws LaunchFailure.
void prepare_log_folders(const SupervisorSettings& settings);

// The --dry_run report: every setting with its source, notes, then one
// shell-ready line per process: "env [-u NAME]... NAME=VALUE... PROGRAM ARGS"
// with the variables set, changed or removed relative to the launcher's
// environment.
std::string describe_plan(const LaunchOptions& options, const std::vector<std::string>& notes,
                          const SupervisorSettings& settings,
                          const Environment& launcher_environment);

// `text` quoted for a POSIX shell when it needs to be.
std::string shell_quote(const std::string& text);

}  // namespace accelerate::launcher
