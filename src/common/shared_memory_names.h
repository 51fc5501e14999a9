// The names of the POSIX shared memory segments the library creates (the
// collectives' segment, reduce-scatter buffers). Every name starts with
// shared_memory_prefix(pid) of the process that created it, so that whoever
// outlives a killed process (the launcher) can remove what it left in
// /dev/shm: a name stays there, holding its memory, until someone removes it.
#pragma once

#include <string>
#include <vector>

namespace accelerate {

// "/accelerate-<pid>-": shm_open names start with it.
std::string shared_memory_prefix(int pid);

// The /dev/shm entries (without the leading "/") that process `pid` created.
std::vector<std::string> shared_memory_names_of(int pid);

// Removes them; returns how many were removed.
int remove_shared_memory_of(int pid);

}  // namespace accelerate
