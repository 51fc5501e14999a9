// `accelerate launch` inside a Slurm job: what Slurm already knows about the
// job fills the multi-machine options the user did not give, so
// `srun --ntasks-per-node=1 accelerate launch ./train` needs no flags.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "accelerate/common/environment.h"
#include "launcher/launch_options.h"

namespace accelerate::launcher {

// MASTER_PORT for a job without --main_process_port: 20000 + SLURM_JOB_ID %
// 10000, so two jobs that share a node do not both take 29500. Below the
// kernel's ephemeral range (32768+). nullopt outside Slurm.
std::optional<int> slurm_default_port(const Environment& env);

// main_process_port = slurm_default_port() when it is still at its default.
// Call it after the config file: a port the file names is the user's choice,
// while this one only keeps jobs apart.
void apply_slurm_port(LaunchOptions& options, const Environment& env);

// Fills, for options still at their default (source kDefault), from the
// Slurm environment, and marks them OptionSource::kSlurm:
//  - in an srun step (SLURM_STEP_ID set), which must run one launcher per
//    node: num_machines (SLURM_STEP_NUM_NODES / SLURM_NNODES), machine_rank
//    (SLURM_NODEID) and, on several nodes, main_process_ip (first host of
//    SLURM_STEP_NODELIST / SLURM_JOB_NODELIST).
// Call it after the flags and before the config file (flags > Slurm > file).
// Returns notes for the user (one line each). Throws UsageError when srun
// started more than one launcher per node, ConfigError for malformed values.
std::vector<std::string> apply_slurm_defaults(LaunchOptions& options, const Environment& env);

}  // namespace accelerate::launcher
