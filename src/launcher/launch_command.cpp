#include "launcher/launch_command.h"

#include <unistd.h>

#include <iostream>

#include "launcher/child_environment.h"
#include "launcher/launch_errors.h"
#include "launcher/launch_options.h"
#include "launcher/output_relay.h"
#include "launcher/port_check.h"
#include "launcher/program_resolution.h"
#include "launcher/supervisor.h"

namespace accelerate::launcher {
namespace {

void print_error(const std::string& message) {
  write_fully(STDERR_FILENO, "accelerate launch: error: " + message + "\n");
}

// One informational line, so a user can see at a glance what was started
// and where its values came from (REFERENCE.md §4: precedence confuses).
std::string start_line(const LaunchOptions& options, const Environment& child_env) {
  const int world_size = options.num_processes * options.num_machines;
  const int first = options.machine_rank * options.num_processes;
  std::string ranks = options.num_processes == 1
                          ? "rank " + std::to_string(first)
                          : "ranks " + std::to_string(first) + "-" +
                                std::to_string(first + options.num_processes - 1);
  return "accelerate launch: starting " + std::to_string(options.num_processes) +
         " process(es), " + ranks + " of " + std::to_string(world_size) + (options.cpu ? " on cpu" : "") +
         ", MASTER_ADDR=" + options.main_process_ip +
         " MASTER_PORT=" + std::to_string(options.main_process_port) +
         ", OMP_NUM_THREADS=" + child_env.at("OMP_NUM_THREADS") + "\n";
}

int launch(const std::vector<std::string>& args) {
  ParsedLaunchCommand parsed = parse_launch_arguments(args);
  if (parsed.show_help) {
    std::cout << launch_help_text();
    return 0;
  }
  LaunchOptions& options = parsed.options;
  const Environment environment = current_environment();
  const MachineFacts machine = probe_machine(environment);
  resolve_launch_options(options, machine);
  ResolvedCommand command = resolve_command(options, environment);

  // Rank 0's machine hosts the rendezvous; check its port before starting
  // anything, so a clash is one line here and not a hang in every rank.
  if (options.main_process_port == 0) {
    options.main_process_port = pick_free_port();
  } else if (options.machine_rank == 0) {
    ensure_port_free(options.main_process_port);
  }

  SupervisorSettings settings;
  settings.command = std::move(command);
  settings.prefix_output = options.num_processes > 1;
  settings.quiet = options.quiet;
  Environment first_env;
  for (int local_rank = 0; local_rank < options.num_processes; ++local_rank) {
    Environment env = build_child_environment(options, local_rank, environment, machine.usable_cores);
    if (local_rank == 0) first_env = env;
    settings.ranks.push_back({global_rank(options, local_rank), to_envp_strings(env)});
  }

  if (!options.quiet) {
    std::string text = start_line(options, first_env);
    if (options.debug) {
      for (const auto& line : describe_effective_settings(options)) {
        text += "accelerate launch:   " + line + "\n";
      }
    }
    write_fully(STDERR_FILENO, text);
  }
  return run_supervisor(settings);
}

}  // namespace

int run_launch_command(const std::vector<std::string>& args) {
  try {
    return launch(args);
  } catch (const UsageError& error) {
    print_error(error.what());
    return kUsageExitCode;
  } catch (const std::exception& error) {
    print_error(error.what());
    return kRuntimeExitCode;
  }
}

}  // namespace accelerate::launcher
