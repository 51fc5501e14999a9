#include "launcher/slurm_defaults.h"

#include <climits>
#include <initializer_list>

#include "accelerate/common/job_state.h"
#include "common/environment_text.h"
#include "common/settings.h"
#include "launcher/launch_errors.h"

namespace accelerate::launcher {
namespace {

// The first of `names` that is set, as a number; nullopt when none is set.
// Slurm has a step-level and a job-level spelling of several values.
std::optional<std::pair<std::string, long long>> slurm_number(
    const Environment& env, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    auto text = lookup(env, name);
    if (!text) continue;
    const auto value = detail::parse_integer_in(*text, 0, LLONG_MAX);
    if (!value) throw ConfigError(settings::bad_value_message(name, "a whole number", *text));
    return std::make_pair(std::string(name), *value);
  }
  return std::nullopt;
}

bool is_default(const LaunchOptions& options, const char* name) {
  return options.source_of(name) == OptionSource::kDefault;
}

}  // namespace

std::optional<int> slurm_default_port(const Environment& env) { return slurm_master_port(env); }

void apply_slurm_port(LaunchOptions& options, const Environment& env) {
  if (auto port = slurm_default_port(env); port && is_default(options, "main_process_port")) {
    options.main_process_port = *port;
    options.sources["main_process_port"] = OptionSource::kSlurm;
  }
}

std::vector<std::string> apply_slurm_defaults(LaunchOptions& options, const Environment& env) {
  std::vector<std::string> notes;
  // mpirun places the processes itself; Slurm's node facts are not ours then.
  if (options.mpirun_hostfile) return notes;
  auto nodes = slurm_number(env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES"});
  const bool in_step = lookup(env, "SLURM_STEP_ID") || lookup(env, "SLURM_STEPID");
  if (!in_step) {
    // An sbatch script runs on the first node only; starting ranks there for
    // the other nodes too would be wrong, so only say how to use them all.
    if (nodes && nodes->second > 1) {
      notes.push_back("this Slurm job has " + std::to_string(nodes->second) +
                      " nodes but only this one is used; to use all, run 'srun --ntasks-per-node=1 "
                      "accelerate launch ...'");
    }
    return notes;
  }
  auto tasks = slurm_number(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"});
  auto node_id = slurm_number(env, {"SLURM_NODEID"});
  if (!nodes || !tasks || !node_id) return notes;  // a hand-made environment: use the flags
  if (tasks->second != nodes->second) {
    throw UsageError(
        "srun started " + std::to_string(tasks->second) + " copies of accelerate launch on " +
        std::to_string(nodes->second) + " node(s) (" + tasks->first +
        "); start exactly one "
        "per node with 'srun --ntasks-per-node=1 accelerate launch ...', and let it start "
        "the processes (--num_processes counts all of them)");
  }
  if (is_default(options, "num_machines")) {
    options.num_machines = static_cast<int>(nodes->second);
    options.sources["num_machines"] = OptionSource::kSlurm;
  }
  if (is_default(options, "machine_rank")) {
    options.machine_rank = static_cast<int>(node_id->second);
    options.sources["machine_rank"] = OptionSource::kSlurm;
  }
  if (options.num_machines > 1 && is_default(options, "main_process_ip")) {
    for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
      if (auto list = lookup(env, name)) {
        options.main_process_ip = first_host_in_slurm_nodelist(*list);
        options.sources["main_process_ip"] = OptionSource::kSlurm;
        break;
      }
    }
  }
  return notes;
}

}  // namespace accelerate::launcher
