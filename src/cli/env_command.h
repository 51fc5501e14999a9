// `accelerate env [--config_file FILE]`: everything a bug report needs about
// this installation and machine, as a Markdown list to paste into an issue:
// versions (ours, the LibTorch we were built against, compiler), what that
// LibTorch supports (CUDA, NCCL, Gloo), OS, CPU, RAM, GPUs, the relevant
// environment variables and the config file in effect. Torch-free: build
// facts are baked in at configure time.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "accelerate/common/environment.h"

namespace accelerate::cli {

// The report for `env` with config file `explicit_config` (may be empty).
// Throws ConfigError when an explicitly named config file does not exist.
std::string environment_report(const Environment& env, const std::string& explicit_config);

// The report's OpenBLAS line, for the core OpenBLAS `picked` (nullopt: no
// OpenBLAS) on a CPU with `cpu_flags`: the core, and when it is a generic
// one on a newer CPU, the OPENBLAS_CORETYPE the launcher sets instead.
std::string openblas_line(const std::optional<std::string>& picked,
                          const std::vector<std::string>& cpu_flags);

// The report's bf16 line for a CPU with `cpu_flags`: its bf16 instructions,
// or the note that bf16 is emulated here (common/bf16_hardware.h).
std::string bf16_line(const std::vector<std::string>& cpu_flags);

// The report's line for the instruction set the library's CPU kernels run on
// a CPU with `cpu_flags` under `env` (accelerate/common/cpu_capability.h): the
// highest here, the cap ACCELERATE_CPU_CAPABILITY sets, or why programs will
// refuse that cap.
std::string kernels_line(const Environment& env, const std::vector<std::string>& cpu_flags);

// `args` are the arguments after "env". Returns the exit code (2 for bad
// flags or a missing --config_file).
int run_env_command(const std::vector<std::string>& args);

}  // namespace accelerate::cli
