#include "cli/launch_command.h"

#include <unistd.h>

#include <chrono>
#include <iostream>
#include <thread>

#include "common/settings.h"
#include "config/config_file.h"
#include "launcher/child_environment.h"
#include "launcher/config_application.h"
#include "launcher/launch_errors.h"
#include "launcher/launch_options.h"
#include "launcher/launch_plan.h"
#include "launcher/machine_facts.h"
#include "launcher/network_checks.h"
#include "launcher/output_relay.h"
#include "launcher/port_check.h"
#include "launcher/program_resolution.h"
#include "launcher/sharding_check.h"
#include "launcher/slurm_defaults.h"
#include "launcher/supervisor.h"

namespace accelerate::cli {
namespace {

// The command is the launcher's front end and speaks its types throughout.
using namespace launcher;

void print_error(const std::string& message) {
  write_fully(STDERR_FILENO, "accelerate launch: error: " + message + "\n");
}

void print_info(const LaunchOptions& options, const std::string& line) {
  if (!options.quiet) write_fully(STDERR_FILENO, "accelerate launch: " + line + "\n");
}

// One informational line, so a user can see at a glance what was started
// and where its values came from (users find the precedence confusing).
std::string start_line(const LaunchOptions& options, const SupervisorSettings& settings) {
  const int local = options.local_processes();
  const int first = options.machine_rank * local;
  std::string ranks =
      local == 1 ? "rank " + std::to_string(first)
                 : "ranks " + std::to_string(first) + "-" + std::to_string(first + local - 1);
  const std::string threads_variable = accelerate::settings::kOmpNumThreads.variable();
  std::string threads = "?";
  for (const auto& entry : settings.ranks.front().environment) {
    if (entry.rfind(threads_variable + "=", 0) == 0)
      threads = entry.substr(threads_variable.size() + 1);
  }
  std::string how = options.mpirun_hostfile
                        ? " through mpirun (--hostfile " + *options.mpirun_hostfile + ")"
                        : "";
  return "starting " + std::to_string(options.mpirun_hostfile ? options.num_processes : local) +
         " process(es)" + how + ", " + (options.mpirun_hostfile ? "all" : ranks) + " of " +
         std::to_string(options.num_processes) + (options.cpu ? " on cpu" : "") +
         ", MASTER_ADDR=" + options.main_process_ip +
         " MASTER_PORT=" + std::to_string(options.main_process_port) + ", " + threads_variable +
         "=" + threads;
}

// Settings that ask for GPUs on a machine without any run on the CPU, as
// Hugging Face's do; say so, rather than let a user believe a GPU trains.
std::vector<std::string> cpu_fallback_notes(const LaunchOptions& options,
                                            const MachineFacts& machine) {
  std::vector<std::string> notes;
  if (options.cpu || machine.visible_gpus > 0) return notes;
  if (options.gpu_ids && *options.gpu_ids != "all") {
    notes.push_back("--gpu_ids " + *options.gpu_ids +
                    ": no GPU is visible on this machine; the processes run on the CPU");
  }
  if (options.use_deepspeed || options.use_fsdp) {
    notes.push_back(std::string(options.use_deepspeed ? "DeepSpeed" : "FSDP") +
                    " without --cpu (use_cpu: false): no GPU is visible on this machine; ZeRO "
                    "runs on the CPU over Gloo");
  }
  return notes;
}

// Settings, then the machine: everything is checked before anything starts.
PlanInputs prepare(LaunchOptions& options, std::vector<std::string>& notes) {
  PlanInputs inputs;
  inputs.environment = current_environment();
  notes = apply_slurm_defaults(options, inputs.environment);
  // Flags > Slurm > config file > defaults: the file fills only what is
  // still at its default (--config_file, else the default file if it exists).
  if (auto path = config::config_file_to_use(options.config_file, inputs.environment)) {
    for (auto& note : apply_config_file(config::load_config_file(*path), options)) {
      notes.push_back(std::move(note));
    }
    options.config_file = *path;  // the listing shows which file was read
  }
  apply_slurm_port(options, inputs.environment);
  const MachineFacts machine = probe_machine(inputs.environment);
  inputs.usable_cores = machine.usable_cores;
  // Under mpirun the ranks run on other machines, whose CPUs this one's
  // facts do not describe; a core the user exported is kept (not asked).
  if (!options.mpirun_hostfile &&
      !lookup(inputs.environment, settings::kOpenblasCoretype.variable())) {
    inputs.openblas_coretype = probe_faster_openblas_core();
    if (inputs.openblas_coretype) {
      notes.push_back(std::string(settings::kOpenblasCoretype.variable()) + "=" +
                      *inputs.openblas_coretype +
                      " (OpenBLAS does not know this CPU and would run its generic kernels)");
    }
  }
  resolve_launch_options(options, machine);
  check_main_address(options);
  const bool cpu_job = options.cpu || machine.visible_gpus == 0;
  for (auto& note : cpu_fallback_notes(options, machine)) notes.push_back(std::move(note));
  for (auto& note : check_sharded_training(options, inputs.environment, cpu_job))
    notes.push_back(std::move(note));
  inputs.program = resolve_command(options, inputs.environment);
  if (options.mpirun_hostfile) {
    inputs.hostfile = read_hostfile(*options.mpirun_hostfile);
    inputs.mpirun_path = find_on_path("mpirun", lookup(inputs.environment, "PATH"));
    if (!inputs.mpirun_path) {
      throw LaunchFailure(
          "--mpirun_hostfile needs OpenMPI's mpirun on PATH (Debian: apt install openmpi-bin)");
    }
    inputs.as_root = geteuid() == 0;
  }
  // Rank 0's machine hosts the rendezvous; check its port before starting
  // anything, so a clash is one line here and not a hang in every rank.
  if (options.main_process_port == 0) {
    options.main_process_port = pick_free_port();
    options.sources["main_process_port"] = OptionSource::kPicked;
  } else if (options.machine_rank == 0 && !options.dry_run) {
    ensure_port_free(options.main_process_port);
  }
  if (std::string ifname = choose_gloo_interface(options, inputs.environment); !ifname.empty()) {
    notes.push_back("GLOO_SOCKET_IFNAME=" + ifname + " (the interface towards " +
                    options.main_process_ip + ")");
  }
  // A terminal for the progress bars of the local main process, whose
  // stderr is our pipe (docs/launching.md, "Output"); not under mpirun,
  // whose ranks run elsewhere, nor over a variable the user set.
  if (::isatty(STDERR_FILENO) == 1 && !options.mpirun_hostfile &&
      !lookup(inputs.environment, settings::kProgressTty.variable())) {
    if (const char* name = ::ttyname(STDERR_FILENO)) {
      inputs.environment[settings::kProgressTty.variable()] = name;
      inputs.clear_stderr_line = true;
      inputs.clear_stdout_line = ::isatty(STDOUT_FILENO) == 1;
    }
  }
  inputs.options = &options;
  return inputs;
}

int launch(const std::vector<std::string>& args) {
  ParsedLaunchCommand parsed = parse_launch_arguments(args);
  if (parsed.show_help) {
    std::cout << launch_help_text();
    return 0;
  }
  LaunchOptions& options = parsed.options;
  std::vector<std::string> notes;
  const PlanInputs inputs = prepare(options, notes);

  if (options.dry_run) {
    SupervisorSettings settings = plan_attempt(inputs, 0);
    write_fully(STDOUT_FILENO, describe_plan(options, notes, settings, current_environment()));
    return 0;
  }
  for (int attempt = 0;; ++attempt) {
    SupervisorSettings settings = plan_attempt(inputs, attempt);
    prepare_log_folders(settings);
    if (attempt == 0) {
      for (const auto& note : notes) print_info(options, "note: " + note);
      print_info(options, start_line(options, settings));
      if (options.debug && !options.quiet) {
        for (const auto& line : describe_effective_settings(options))
          print_info(options, "  " + line);
      }
    }
    SupervisorResult result = supervise(settings);
    if (result.exit_code == 0 || result.stopped_by_signal) return result.exit_code;
    if (attempt >= options.max_restarts) {
      if (options.max_restarts > 0) {
        print_error("the job failed after " + std::to_string(options.max_restarts) +
                    " restart(s) (--max_restarts " + std::to_string(options.max_restarts) + ")");
      }
      return result.exit_code;
    }
    // Failures are reported even with -q; so is the restart that follows.
    write_fully(STDERR_FILENO, "accelerate launch: restarting the local processes (restart " +
                                   std::to_string(attempt + 1) + " of " +
                                   std::to_string(options.max_restarts) + ", " +
                                   accelerate::settings::kRestartCount.variable() + "=" +
                                   std::to_string(attempt + 1) + ")\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(options.monitor_interval_ms));
  }
}

}  // namespace

int run_launch_command(const std::vector<std::string>& args) {
  try {
    return launch(args);
  } catch (const UsageError& error) {
    print_error(error.what());
    return kUsageExitCode;
  } catch (const config::ConfigFileError& error) {
    // A config file that cannot be used is reported like a bad flag.
    print_error(error.what());
    return kUsageExitCode;
  } catch (const std::exception& error) {
    print_error(error.what());
    return kRuntimeExitCode;
  }
}

}  // namespace accelerate::cli
