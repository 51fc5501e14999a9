// Facts about this machine that pick the launcher's defaults: how many GPUs
// the ranks will see (default process count) and how many cores they share
// (default thread count). Probing is kept apart from the pure functions that
// use the facts, so tests can hand in any machine.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "accelerate/common/environment.h"

namespace accelerate::launcher {

struct MachineFacts {
  int visible_gpus = 0;
  int usable_cores = 1;
};

// Reads /proc, /sys and the CPU affinity mask of this process.
MachineFacts probe_machine(const Environment& env);

// The OPENBLAS_CORETYPE that gives the system's OpenBLAS this CPU's kernels
// when it picked a pre-AVX core here (common/openblas_core.h); nullopt
// otherwise. Loads libopenblas.so.0 to ask: only `accelerate launch` needs it.
std::optional<std::string> probe_faster_openblas_core();

// GPUs the children will see: the entries of CUDA_VISIBLE_DEVICES (when set)
// up to the first invalid one, at most `physical_gpus`. CUDA itself stops at
// the first invalid entry, and an empty value hides every GPU.
int count_visible_gpus(int physical_gpus, const std::optional<std::string>& cuda_visible_devices);

// Physical NVIDIA GPUs: the driver makes one directory per GPU here.
int count_nvidia_gpus(const std::string& proc_dir = "/proc/driver/nvidia/gpus");

// One GPU of the amdgpu driver's kfd topology, where each node is a CPU
// socket or a GPU (each MI250X GCD is a GPU node of its own). Nodes come in
// the topology's order, the order ROCm numbers its GPUs in.
struct AmdGpuNode {
  int node = 0;            // the node's folder number
  std::string gfx_target;  // "gfx90a", from gfx_target_version; empty when absent
  std::string name;        // the node's name file, first line trimmed; may be empty
};
inline const char* const kKfdNodesFolder = "/sys/class/kfd/kfd/topology/nodes";

// The nodes whose properties show SIMDs: ROCm's own test for a GPU (CPU
// nodes have simd_count 0). No folder (no amdgpu driver) means no GPUs.
std::vector<AmdGpuNode> read_amd_gpu_nodes(const std::string& kfd_nodes_dir = kKfdNodesFolder);
int count_amd_gpus(const std::string& kfd_nodes_dir = kKfdNodesFolder);

// AMD GPUs a ROCm program will see: ROCR_VISIBLE_DEVICES filters first (in
// the ROCm runtime; set but empty hides every GPU), then HIP filters what is
// left with HIP_VISIBLE_DEVICES, or CUDA_VISIBLE_DEVICES when that is empty or
// unset. HIP reads an empty list as unset, not as "no GPUs" as CUDA does.
int count_visible_amd_gpus(int physical_gpus, const Environment& env);

// Where the GPU drivers describe their GPUs; tests point these at fake trees.
struct GpuDriverFolders {
  std::string nvidia_gpus = "/proc/driver/nvidia/gpus";
  std::string amd_kfd_nodes = kKfdNodesFolder;
};

// Visible NVIDIA GPUs plus visible AMD GPUs: what the ranks of this machine
// can use, so the launcher's default process count.
int count_visible_gpus_of_all_vendors(const Environment& env, const GpuDriverFolders& folders = {});

// Cores this process may run on: the affinity mask (what a container or
// taskset grants), else the online count, at least 1.
int count_usable_cpu_cores();

// The whole file, or nullopt when it cannot be read (/proc and sysfs facts).
std::optional<std::string> read_text_file(const std::string& path);

}  // namespace accelerate::launcher
