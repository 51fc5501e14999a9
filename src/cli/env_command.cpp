#include "cli/env_command.h"

#include <gnu/libc-version.h>
#include <sys/utsname.h>

#include <cstdio>
#include <iostream>
#include <optional>

#include "accelerate/common/version.h"
#include "cli/memory_estimate.h"
#include "cli/system_facts.h"
#include "cli/test_command.h"
#include "common/bf16_hardware.h"
#include "common/cpu_capability.h"
#include "common/openblas_core.h"
#include "common/settings.h"
#include "config/config_file.h"
#include "launcher/launch_errors.h"
#include "launcher/machine_facts.h"

// Baked in by src/cli/sources.cmake from the configure step.
#ifndef ACCELERATE_BUILD_TORCH_VERSION
#define ACCELERATE_BUILD_TORCH_VERSION "unknown"
#endif
#ifndef ACCELERATE_BUILD_COMPILER
#define ACCELERATE_BUILD_COMPILER "unknown"
#endif
#ifndef ACCELERATE_BUILD_TYPE
#define ACCELERATE_BUILD_TYPE "unknown"
#endif
#ifndef ACCELERATE_BUILD_HAS_CUDA
#define ACCELERATE_BUILD_HAS_CUDA 0
#endif
#ifndef ACCELERATE_BUILD_HAS_NCCL
#define ACCELERATE_BUILD_HAS_NCCL 0
#endif
#ifndef ACCELERATE_BUILD_HAS_GLOO
#define ACCELERATE_BUILD_HAS_GLOO 0
#endif

namespace accelerate::cli {
namespace {

const char* const kHelp =
    "usage: accelerate env [--config_file FILE]\n"
    "\n"
    "Prints versions, build features, OS, CPU, RAM, GPUs, relevant environment\n"
    "variables and the config file in effect, ready to paste into a bug report.\n"
    "\n"
    "options:\n"
    "  --config_file FILE   report this config file instead of the default one\n"
    "  -h, --help           show this help\n";

const char* yes_no(bool value) { return value ? "yes" : "no"; }

// Variables that change what a job does; reported when set: every declared
// setting (common/settings.h), and these others.
bool is_relevant_variable(const std::string& name) {
  static const char* const kPrefixes[] = {"ACCELERATE_", "FSDP_", "NCCL_", "GLOO_", "TORCH_"};
  static const char* const kNames[] = {"CUDA_VISIBLE_DEVICES",
                                       "HIP_VISIBLE_DEVICES",
                                       "ROCR_VISIBLE_DEVICES",
                                       "MKL_NUM_THREADS",
                                       "HF_HOME",
                                       "XDG_CACHE_HOME",
                                       "MASTER_ADDR",
                                       "MASTER_PORT",
                                       "WORLD_SIZE",
                                       "RANK",
                                       "LOCAL_RANK",
                                       "LOCAL_WORLD_SIZE",
                                       "LD_LIBRARY_PATH"};
  for (const char* prefix : kPrefixes) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  for (const settings::Description& about : settings::all()) {
    if (name == about.variable) return true;
  }
  for (const char* known : kNames) {
    if (name == known) return true;
  }
  return false;
}

std::string platform_line() {
  std::string line = os_pretty_name(launcher::read_text_file("/etc/os-release").value_or(""))
                         .value_or("unknown OS");
  struct utsname names {};
  if (::uname(&names) == 0) {
    line += "; " + std::string(names.sysname) + " " + names.release + " " + names.machine;
  }
  return line + "; glibc " + gnu_get_libc_version();
}

}  // namespace

std::string openblas_line(const std::optional<std::string>& picked,
                          const std::vector<std::string>& cpu_flags) {
  if (!picked) return "- OpenBLAS kernels: no libopenblas.so.0 found\n";
  const auto faster = detail::faster_openblas_core(*picked, cpu_flags);
  if (!faster) return "- OpenBLAS kernels: " + *picked + "\n";
  return "- OpenBLAS kernels: " + *picked + " (generic: OpenBLAS does not know this CPU; " +
         "`accelerate launch` gives its processes OPENBLAS_CORETYPE=" + *faster + ")\n";
}

std::string bf16_line(const std::vector<std::string>& cpu_flags) {
  const auto instructions = detail::bf16_instructions(cpu_flags);
  if (!instructions.empty()) {
    std::string names;
    for (const auto& name : instructions) names += (names.empty() ? "" : " ") + name;
    return "- bf16: in hardware (" + names + ")\n";
  }
  if (auto note = detail::bf16_emulation_note(cpu_flags)) return "- bf16: " + *note + "\n";
  return "- bf16: unknown (no CPU flags this command knows)\n";
}

std::string kernels_line(const Environment& env, const std::vector<std::string>& cpu_flags) {
  const std::string highest = to_string(detail::highest_cpu_capability(cpu_flags));
  try {
    const std::string used = to_string(detail::resolve_cpu_capability(env, cpu_flags));
    if (!settings::kCpuCapability.read(env)) return "- CPU kernels: " + used + "\n";
    return "- CPU kernels: " + used + " (" + settings::kCpuCapability.variable() +
           "; the highest here is " + highest + ")\n";
  } catch (const ConfigError& e) {
    return std::string("- CPU kernels: ") + e.what() + "; programs stop with this error\n";
  }
}

namespace {

std::string cpu_lines(const Environment& env) {
  const CpuInfo cpu = parse_cpuinfo(detail::read_cpuinfo());
  std::string text = "- CPU: " + (cpu.model.empty() ? std::string("unknown model") : cpu.model) +
                     ", " + std::to_string(cpu.logical_cpus) + " logical CPUs, " +
                     std::to_string(launcher::count_usable_cpu_cores()) +
                     " usable by this process\n";
  std::string flags;
  for (const auto& flag : notable_cpu_flags(cpu.flags)) flags += (flags.empty() ? "" : " ") + flag;
  text +=
      "- CPU features: " +
      (flags.empty() ? std::string("none of the vector/matrix extensions we look for") : flags) +
      "\n";
  text += bf16_line(cpu.flags);
  text += kernels_line(env, cpu.flags);
  return text + openblas_line(detail::openblas_core_of_system_library(), cpu.flags);
}

std::string config_lines(const Environment& env, const std::string& explicit_config) {
  const auto chosen = config::config_file_to_use(
      explicit_config.empty() ? std::nullopt : std::optional<std::string>(explicit_config), env);
  if (!chosen) {
    return "- Config file: not found (looked for " + config::default_config_file(env) + ")\n";
  }
  std::string text = "- Config file: " + *chosen + "\n";
  try {
    for (const auto& line : config::describe_config_file(config::load_config_file(*chosen))) {
      text += "\t- " + line + "\n";
    }
  } catch (const std::exception& error) {
    // A broken config is exactly what a bug report should show.
    text += "\t- cannot be used: " + std::string(error.what()) + "\n";
  }
  return text;
}

}  // namespace

std::string environment_report(const Environment& env, const std::string& explicit_config) {
  std::string text = "\nCopy-and-paste the text below in your GitHub issue\n\n";
  text += "- accelerate-cpp version: " + std::string(kVersion) + "\n";
  text += "- LibTorch version (built against): " ACCELERATE_BUILD_TORCH_VERSION "\n";
  text += "- Compiler: " ACCELERATE_BUILD_COMPILER ", build type " ACCELERATE_BUILD_TYPE "\n";
  text += std::string("- LibTorch features: CUDA ") + yes_no(ACCELERATE_BUILD_HAS_CUDA) +
          ", NCCL " + yes_no(ACCELERATE_BUILD_HAS_NCCL) + ", Gloo " +
          yes_no(ACCELERATE_BUILD_HAS_GLOO) + "\n";
  const auto sanity = find_sanity_program(current_executable_path());
  text += "- accelerate test program: " +
          (sanity ? *sanity : std::string("not found (`accelerate test` cannot run)")) + "\n";
  text += "- Platform: " + platform_line() + "\n";
  text += cpu_lines(env);
  if (auto memory = total_memory_bytes(launcher::read_text_file("/proc/meminfo").value_or(""))) {
    text += "- RAM: " + format_bytes(static_cast<double>(*memory)) + "\n";
  } else {
    text += "- RAM: unknown\n";
  }
  const auto gpus = list_gpus(lookup(env, "PATH"));
  if (gpus.empty()) {
    text +=
        "- GPUs: none found (no nvidia-smi on PATH, no /proc/driver/nvidia/gpus, no GPU node in " +
        std::string(launcher::kKfdNodesFolder) + ")\n";
  } else {
    text += "- GPUs: " + std::to_string(gpus.size()) + "\n";
    for (const auto& gpu : gpus) text += "\t- " + gpu + "\n";
  }
  std::string variables;
  for (const auto& [name, value] : env) {
    if (is_relevant_variable(name)) variables += "\t- " + name + "=" + value + "\n";
  }
  text += "- Environment variables:" +
          (variables.empty() ? std::string(" none of ours set\n") : "\n" + variables);
  text += config_lines(env, explicit_config);
  return text;
}

int run_env_command(const std::vector<std::string>& args) {
  std::string config_file;
  try {
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& arg = args[i];
      if (arg == "-h" || arg == "--help") {
        std::cout << kHelp;
        return 0;
      }
      if (arg == "--config_file" || arg == "--config-file") {
        if (i + 1 >= args.size()) throw ConfigError(arg + " expects a file");
        config_file = args[++i];
      } else if (arg.rfind("--config_file=", 0) == 0 || arg.rfind("--config-file=", 0) == 0) {
        config_file = arg.substr(arg.find('=') + 1);
      } else {
        throw ConfigError("unexpected argument '" + arg + "' (see 'accelerate env --help')");
      }
      if (config_file.empty()) throw ConfigError("--config_file expects a file, got ''");
    }
    std::cout << environment_report(current_environment(), config_file);
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "accelerate env: error: " << error.what() << "\n";
    return launcher::kUsageExitCode;
  }
}

}  // namespace accelerate::cli
