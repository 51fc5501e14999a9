#include "launcher/launch_plan.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "launcher/child_environment.h"
#include "launcher/launch_errors.h"

namespace accelerate::launcher {
namespace {

Environment parse_envp(const std::vector<std::string>& entries) {
  Environment env;
  for (const auto& entry : entries) {
    auto eq = entry.find('=');
    env[entry.substr(0, eq)] = eq == std::string::npos ? "" : entry.substr(eq + 1);
  }
  return env;
}

std::string parent_folder(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

void make_folders(const std::string& path) {
  if (path.empty() || path == "." || path == "/") return;
  struct stat info {};
  if (stat(path.c_str(), &info) == 0) {
    if (!S_ISDIR(info.st_mode))
      throw LaunchFailure("cannot use log folder '" + path + "': not a folder");
    return;
  }
  make_folders(parent_folder(path));
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    throw LaunchFailure("cannot create log folder '" + path + "': " + std::strerror(errno));
  }
}

// Which streams go to the log files: --tee, else both.
void add_log_files(const LaunchOptions& options, int restart_count, const std::string& who,
                   RankLaunch& launch) {
  if (!options.log_dir) return;
  const int tee = options.tee.value_or(3);
  const std::string folder =
      *options.log_dir + "/attempt_" + std::to_string(restart_count) + "/" + who + "/";
  if (tee & 1) launch.stdout_log = folder + "stdout.log";
  if (tee & 2) launch.stderr_log = folder + "stderr.log";
}

}  // namespace

SupervisorSettings plan_attempt(const PlanInputs& inputs, int restart_count) {
  const LaunchOptions& options = *inputs.options;
  SupervisorSettings settings;
  settings.quiet = options.quiet;
  if (inputs.mpirun_path) {
    Environment rank_env =
        build_child_environment(options, 0, inputs.environment, inputs.usable_cores, restart_count,
                                inputs.openblas_coretype);
    MpirunLaunch mpirun = build_mpirun_launch(options, inputs.program, inputs.environment, rank_env,
                                              *inputs.mpirun_path, inputs.hostfile, inputs.as_root);
    settings.command = mpirun.command;
    settings.prefix_output = false;  // one process: mpirun; its ranks' lines come through it
    RankLaunch launch{0, to_envp_strings(mpirun.environment), "mpirun", "", ""};
    add_log_files(options, restart_count, "mpirun", launch);
    settings.ranks.push_back(std::move(launch));
    return settings;
  }
  settings.command = inputs.program;
  settings.prefix_output = options.local_processes() > 1;
  settings.clear_stdout_line = inputs.clear_stdout_line;
  settings.clear_stderr_line = inputs.clear_stderr_line;
  for (int local_rank = 0; local_rank < options.local_processes(); ++local_rank) {
    Environment env =
        build_child_environment(options, local_rank, inputs.environment, inputs.usable_cores,
                                restart_count, inputs.openblas_coretype);
    const int rank = global_rank(options, local_rank);
    RankLaunch launch{rank, to_envp_strings(env), "", "", ""};
    add_log_files(options, restart_count, "rank_" + std::to_string(rank), launch);
    settings.ranks.push_back(std::move(launch));
  }
  return settings;
}

void prepare_log_folders(const SupervisorSettings& settings) {
  for (const auto& rank : settings.ranks) {
    for (const std::string* path : {&rank.stdout_log, &rank.stderr_log}) {
      if (!path->empty()) make_folders(parent_folder(*path));
    }
  }
}

std::string shell_quote(const std::string& text) {
  const char* safe = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:=,@%+-";
  if (!text.empty() && text.find_first_not_of(safe) == std::string::npos) return text;
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string describe_plan(const LaunchOptions& options, const std::vector<std::string>& notes,
                          const SupervisorSettings& settings,
                          const Environment& launcher_environment) {
  std::string out = "accelerate launch: dry run; nothing was started\n";
  out += "settings (value, then where it came from: flag > slurm > config file > default):\n";
  for (const auto& line : describe_effective_settings(options)) out += "  " + line + "\n";
  for (const auto& note : notes) out += "note: " + note + "\n";
  out += "commands (one per process this launcher starts; variables set, changed or removed):\n";
  for (const auto& rank : settings.ranks) {
    Environment env = parse_envp(rank.environment);
    std::string line = "env";
    for (const auto& [key, value] : launcher_environment) {
      if (env.count(key) == 0) line += " -u " + shell_quote(key);
    }
    for (const auto& [key, value] : env) {
      auto before = launcher_environment.find(key);
      if (before == launcher_environment.end() || before->second != value) {
        line += " " + shell_quote(key + "=" + value);
      }
    }
    line += " " + shell_quote(settings.command.executable);
    for (std::size_t i = 1; i < settings.command.argv.size(); ++i) {
      line += " " + shell_quote(settings.command.argv[i]);
    }
    std::string who = rank.name.empty() ? "rank " + std::to_string(rank.global_rank) : rank.name;
    out += "  " + who + ": " + line + "\n";
    if (!rank.stdout_log.empty()) out += "    stdout also to " + rank.stdout_log + "\n";
    if (!rank.stderr_log.empty()) out += "    stderr also to " + rank.stderr_log + "\n";
  }
  return out;
}

}  // namespace accelerate::launcher
