// What /proc/cpuinfo says about the CPU: `accelerate env` reports it, and the
// launcher and the Accelerator pick OpenBLAS's kernels by its flags
// (openblas_core.h). The parser takes the text, so tests hand in any CPU.
#pragma once

#include <string>
#include <vector>

namespace accelerate {
namespace detail {

inline const char* const kCpuInfoFile = "/proc/cpuinfo";

struct CpuInfo {
  std::string model;               // "model name" (x86), "Hardware" (Arm), "cpu model" (MIPS)
  int logical_cpus = 0;            // "processor" entries
  std::vector<std::string> flags;  // of the first processor ("flags", Arm's "Features")
};
CpuInfo parse_cpuinfo(const std::string& cpuinfo);

// /proc/cpuinfo's text, empty when it cannot be read.
std::string read_cpuinfo(const char* path = kCpuInfoFile);

}  // namespace detail
}  // namespace accelerate
