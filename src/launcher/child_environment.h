// The environment each rank starts with: the launcher's own environment plus
// torchrun's variables and the ACCELERATE_* settings. A pure function of its
// inputs, so every variable is unit-tested without starting a process.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "accelerate/common/environment.h"
#include "launcher/launch_options.h"

namespace accelerate::launcher {

// Global rank of local process `local_rank` on this machine.
int global_rank(const LaunchOptions& options, int local_rank);

// OMP_NUM_THREADS for each rank when neither the flag nor the user sets it:
// the usable cores shared evenly, at least 1 (docs/launching.md, "Threads").
// (OPENBLAS_NUM_THREADS is 1 and OMP_WAIT_POLICY is PASSIVE, see
// build_child_environment.)
int default_threads_per_process(int usable_cores, int num_processes);

// The settings this launch gives every rank (mixed precision, accumulation,
// CPU, sharded training, ...), each with where it was written, in front of
// `launcher_environment` (which must outlive the result): exactly the
// settings build_child_environment writes, so the launcher's checks read
// what the ranks will read without writing an environment and parsing it back.
settings::LayeredValues launch_setting_values(const LaunchOptions& options,
                                              const Environment& launcher_environment);

// Environment of local process `local_rank` in attempt `restart_count`
// (0 for the first start). `options` must be resolved and hold a concrete
// main_process_port (port 0 already replaced by a free port).
// `openblas_coretype`: the machine's MachineFacts::faster_openblas_core,
// written unless the launcher's environment sets OPENBLAS_CORETYPE.
Environment build_child_environment(
    const LaunchOptions& options, int local_rank, const Environment& launcher_environment,
    int usable_cores, int restart_count = 0,
    const std::optional<std::string>& openblas_coretype = std::nullopt);

// "KEY=VALUE" strings, ready for execve's envp.
std::vector<std::string> to_envp_strings(const Environment& environment);

}  // namespace accelerate::launcher
