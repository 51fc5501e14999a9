// Facts about this machine for `accelerate env`, each read from a text the
// kernel or the distribution provides. Parsers take the text, so tests can
// hand in any machine's files; readers take the path.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/cpu_info.h"
#include "launcher/machine_facts.h"

namespace accelerate::cli {

// PRETTY_NAME from /etc/os-release text (quotes removed), else NAME VERSION.
std::optional<std::string> os_pretty_name(const std::string& os_release);

using detail::CpuInfo;  // common/cpu_info.h, shared with the launcher
using detail::parse_cpuinfo;

// The flags that matter for training speed (vector width, bf16/fp16 and AMX
// matrix units), those of `flags` in a fixed order.
std::vector<std::string> notable_cpu_flags(const std::vector<std::string>& flags);

// MemTotal from /proc/meminfo text, in bytes.
std::optional<uint64_t> total_memory_bytes(const std::string& meminfo);

// GPU lines: `nvidia-smi -L` when it is on PATH, else the model of each
// /proc/driver/nvidia/gpus/*/information; then one line per AMD GPU node of
// the amdgpu driver's kfd topology (launcher::read_amd_gpu_nodes). Every GPU
// the drivers show, whatever the *_VISIBLE_DEVICES variables hide (as
// nvidia-smi does). Empty when no driver shows a GPU.
std::vector<std::string> list_gpus(const std::optional<std::string>& path_variable,
                                   const std::string& proc_gpus_dir = "/proc/driver/nvidia/gpus",
                                   const std::string& kfd_nodes_dir = launcher::kKfdNodesFolder);

}  // namespace accelerate::cli
