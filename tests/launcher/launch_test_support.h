// What the launcher tests share: the probe program they start, launcher
// argument lists for CPU jobs, and flag parsing as `accelerate launch` does it.
#pragma once

#include <string>
#include <vector>

#include "launcher/launch_errors.h"
#include "launcher/launch_options.h"

namespace accelerate::launcher {

// tests/support/launch_probe.cpp, built beside the tests.
inline const std::string kProbe = LAUNCH_PROBE_PATH;

// `accelerate launch` arguments for N CPU ranks on a free port, quiet, then
// `flags`, then `program`.
inline std::vector<std::string> cpu_job(int ranks, const std::vector<std::string>& flags,
                                        const std::vector<std::string>& program) {
  std::vector<std::string> args = {
      "launch", "--cpu", "--num_processes", std::to_string(ranks), "--main_process_port",
      "0",      "-q"};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), program.begin(), program.end());
  return args;
}
inline std::vector<std::string> cpu_job(int ranks, const std::vector<std::string>& program) {
  return cpu_job(ranks, {}, program);
}

inline LaunchOptions parse(const std::vector<std::string>& args) {
  return parse_launch_arguments(args).options;
}

// Parsed and resolved for a machine with no GPU.
inline LaunchOptions resolved(const std::vector<std::string>& args) {
  LaunchOptions options = parse(args);
  resolve_launch_options(options, MachineFacts{});
  return options;
}

// The message of the UsageError that parsing (and resolving) `args` throws.
inline std::string usage_error_of(const std::vector<std::string>& args,
                                  const MachineFacts& facts = {}) {
  try {
    LaunchOptions options = parse(args);
    resolve_launch_options(options, facts);
  } catch (const UsageError& error) {
    return error.what();
  }
  return "(no error)";
}

}  // namespace accelerate::launcher
