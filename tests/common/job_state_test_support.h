// What the JobState tests share: parsing an environment, its error, and
// the environment `srun -N2 -n4` gives a task.
#pragma once

#include <string>

#include "accelerate/common/errors.h"
#include "accelerate/common/job_state.h"

namespace accelerate::testing::job_state {

inline JobState parse(const Environment& env, const JobOptions& options = {},
                      const Hardware& hardware = {}) {
  return JobState::from_environment(env, options, hardware);
}

// The ConfigError message, or a marker that makes the comparison fail.
inline std::string error_of(const Environment& env, const JobOptions& options = {},
                            const Hardware& hardware = {}) {
  try {
    parse(env, options, hardware);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "<no error>";
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// What `srun -N2 -n4` gives task 3 (seen under slurm-wlm 22.05, plus nodes).
inline Environment srun_task_3_of_4() {
  return {{"SLURM_STEP_ID", "0"},
          {"SLURM_STEPID", "0"},
          {"SLURM_PROCID", "3"},
          {"SLURM_NTASKS", "4"},
          {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_LOCALID", "1"},
          {"SLURM_NNODES", "2"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_NODEID", "1"},
          {"SLURM_JOB_NODELIST", "gpu[07-08]"},
          {"SLURM_STEP_NODELIST", "gpu[07-08]"},
          {"SLURM_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"}};
}

inline Environment with(Environment env, const Environment& extra) {
  for (const auto& [key, value] : extra) env[key] = value;
  return env;
}

inline Environment without(Environment env, const std::string& key) {
  env.erase(key);
  return env;
}

}  // namespace accelerate::testing::job_state
