// Facts about this machine that pick the launcher's defaults: how many GPUs
// the ranks will see (default process count) and how many cores they share
// (default thread count). Probing is kept apart from the pure functions that
// use the facts, so tests can hand in any machine.
#pragma once

#include <optional>
#include <string>

#include "accelerate/environment.h"

namespace accelerate::launcher {

struct MachineFacts {
  int visible_gpus = 0;
  int usable_cores = 1;
};

// Reads /proc and the CPU affinity mask of this process.
MachineFacts probe_machine(const Environment& env);

// GPUs the children will see: the entries of CUDA_VISIBLE_DEVICES (when set)
// up to the first invalid one, at most `physical_gpus`. CUDA itself stops at
// the first invalid entry, and an empty value hides every GPU.
int count_visible_gpus(int physical_gpus, const std::optional<std::string>& cuda_visible_devices);

// Physical NVIDIA GPUs: the driver makes one directory per GPU here.
int count_nvidia_gpus(const std::string& proc_dir = "/proc/driver/nvidia/gpus");

// Cores this process may run on: the affinity mask (what a container or
// taskset grants), else the online count, at least 1.
int count_usable_cpu_cores();

}  // namespace accelerate::launcher
