// Starting one rank: fork, set the child up, exec. Kept apart from the
// supervisor's loop because the code between fork and exec follows its own
// rules (async-signal-safe calls only, everything allocated before fork).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "launcher/program_resolution.h"

namespace accelerate::launcher {

struct SpawnedRank {
  pid_t pid = -1;      // also the id of the rank's process group
  int stdout_fd = -1;  // read ends of the rank's stdout and stderr pipes,
  int stderr_fd = -1;  // non-blocking and close-on-exec
};

// Starts `command` with `environment` ("KEY=VALUE"). The child:
//  - leads a new process group, so kill(-pid, sig) reaches everything the
//    rank started (data loader workers, shell pipelines);
//  - gets SIGKILL if the launcher dies (PR_SET_PDEATHSIG), so a SIGKILLed
//    launcher leaves no ranks behind;
//  - writes stdout/stderr into pipes the launcher relays;
//  - reads /dev/null instead of a terminal when `detach_stdin` (a process
//    outside the terminal's foreground group that reads it gets stopped).
// Must be called with the launcher single-threaded. Throws LaunchFailure.
SpawnedRank spawn_rank(const ResolvedCommand& command, const std::vector<std::string>& environment,
                       bool detach_stdin);

}  // namespace accelerate::launcher
