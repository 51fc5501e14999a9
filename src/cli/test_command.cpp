#include "cli/test_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <iostream>

#include "cli/launch_command.h"
#include "launcher/launch_errors.h"
#include "launcher/launch_options.h"

#ifndef ACCELERATE_LIBEXEC_FROM_BIN
#define ACCELERATE_LIBEXEC_FROM_BIN "../libexec/accelerate"
#endif

namespace accelerate::cli {
namespace {

constexpr const char* kSuccessLine =
    "Test is a success! You are ready for your distributed training!";

const char* const kHelp =
    "usage: accelerate test [--config_file FILE] [LAUNCH FLAGS...]\n"
    "\n"
    "Runs a built-in distributed sanity program with the settings `accelerate\n"
    "launch` would use (the config file, then any launch flags given here, e.g.\n"
    "--cpu --num_processes 2). It checks process indices, all-reduce, gather,\n"
    "broadcast, and a tiny prepared model's weight broadcast, data sharding and\n"
    "gradient sync, printing one line per check.\n"
    "\n"
    "Exit code: 0 when every check passes on every process, 1 when a check or the\n"
    "launch fails, 2 for bad flags or a bad config file.\n";

bool is_executable_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

// `accelerate launch` takes the first non-flag argument for the program to
// run; here the program is ours, so such an argument is a mistake. Returns
// it, or "" when every argument is a launch flag or its value. Unknown flags
// are left for the launcher to report.
std::string first_positional(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 2 || arg[0] != '-') return arg;
    const launcher::FlagSpec* spec = nullptr;
    if (arg[1] == '-') {
      std::string name =
          arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
      for (char& c : name) {
        if (c == '-') c = '_';
      }
      spec = launcher::find_launch_flag(name);
      if (arg.find('=') != std::string::npos) continue;
    } else {
      for (const auto& row : launcher::launch_flag_table()) {
        if (arg.size() == 2 && row.short_name == arg[1]) spec = &row;
      }
    }
    if (spec != nullptr && spec->value_name != nullptr) ++i;  // skip its value
  }
  return "";
}

}  // namespace

std::string current_executable_path() {
  char buffer[4096];
  const ssize_t length = ::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (length <= 0) return "";
  return std::string(buffer, static_cast<size_t>(length));
}

std::vector<std::string> helper_program_candidates(const std::string& executable_path,
                                                   const std::string& name) {
  const auto slash = executable_path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : executable_path.substr(0, slash);
  return {dir + "/" + name, dir + "/" + ACCELERATE_LIBEXEC_FROM_BIN + "/" + name};
}

std::vector<std::string> sanity_program_candidates(const std::string& executable_path) {
  return helper_program_candidates(executable_path, kSanityProgramName);
}

std::optional<std::string> find_helper_program(const std::string& executable_path,
                                               const std::string& name) {
  for (const auto& candidate : helper_program_candidates(executable_path, name)) {
    if (is_executable_file(candidate)) return candidate;
  }
  return std::nullopt;
}

std::optional<std::string> find_sanity_program(const std::string& executable_path) {
  return find_helper_program(executable_path, kSanityProgramName);
}

int run_test_command(const std::vector<std::string>& args) {
  for (const auto& arg : args) {
    if (arg == "-h" || arg == "--help") {
      std::cout << kHelp;
      return 0;
    }
  }
  const std::string stray = first_positional(args);
  if (!stray.empty()) {
    std::cerr << "accelerate test: error: unexpected argument '" << stray
              << "': accelerate test runs its own program and takes only launch flags "
                 "(e.g. --config_file FILE, --cpu, --num_processes N)\n";
    return launcher::kUsageExitCode;
  }
  const std::string self = current_executable_path();
  const auto program = find_sanity_program(self);
  if (!program) {
    std::string looked;
    for (const auto& candidate : sanity_program_candidates(self))
      looked += (looked.empty() ? "" : ", ") + candidate;
    std::cerr << "accelerate test: error: the sanity program " << kSanityProgramName
              << " was not found (looked for " << looked
              << "); build the target 'accelerate_sanity_check' or reinstall accelerate-cpp\n"
              << "Test failed: nothing was run.\n";
    return launcher::kRuntimeExitCode;
  }
  // Every argument is a launch flag; the sanity program comes last.
  std::vector<std::string> launch_args = args;
  launch_args.push_back(*program);
  std::string shown = "accelerate launch";
  for (const auto& arg : launch_args) shown += " " + arg;
  std::cout << "Running: " << shown << std::endl;

  const int code = run_launch_command(launch_args);
  if (code == 0) {
    std::cout << kSuccessLine << std::endl;
    return 0;
  }
  if (code == launcher::kUsageExitCode) {
    std::cerr << "Test failed: the launch settings were rejected (see the error above).\n";
    return launcher::kUsageExitCode;
  }
  std::cerr << "Test failed: the sanity program or its launch exited with code " << code
            << " (see the check results and errors above).\n";
  return launcher::kRuntimeExitCode;
}

}  // namespace accelerate::cli
