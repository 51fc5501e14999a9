// `accelerate launch --mpirun_hostfile FILE`: instead of starting the ranks
// itself, the launcher starts OpenMPI's mpirun once, which starts them on the
// hosts of FILE. The ranks learn their place from mpirun's OMPI_COMM_WORLD_*
// variables (the library reads those), and the rendezvous settings travel
// with `-x NAME`.
#pragma once

#include <string>
#include <vector>

#include "accelerate/common/environment.h"
#include "launcher/launch_options.h"
#include "launcher/program_resolution.h"

namespace accelerate::launcher {

struct Hostfile {
  std::string first_host;  // where mpirun puts rank 0
  int slots = 0;           // sum of slots=N (a host without one counts 1)
};

// Reads an OpenMPI hostfile ("host slots=2", '#' comments). Throws
// LaunchFailure for a missing file or one without hosts.
Hostfile read_hostfile(const std::string& path);

struct MpirunLaunch {
  ResolvedCommand command;  // mpirun ... PROGRAM ARGS
  Environment environment;  // mpirun's own environment
};

// The mpirun command for `program`. `rank_environment` is what a rank would
// get from our own launcher; its topology variables (RANK, WORLD_SIZE, ...)
// are dropped, since they would hide mpirun's. `as_root` adds
// --allow-run-as-root; more processes than slots adds --oversubscribe.
MpirunLaunch build_mpirun_launch(const LaunchOptions& options, const ResolvedCommand& program,
                                 const Environment& launcher_environment,
                                 const Environment& rank_environment,
                                 const std::string& mpirun_path, const Hostfile& hostfile,
                                 bool as_root);

}  // namespace accelerate::launcher
