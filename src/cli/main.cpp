// The `accelerate` command line. It links no LibTorch, so it starts in
// milliseconds (Hugging Face's spends seconds importing torch: #1952).
// Subcommands live in a table; each owns its flags and its error lines.
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "accelerate/common/version.h"
#include "cli/config_command.h"
#include "cli/env_command.h"
#include "cli/estimate_memory_command.h"
#include "cli/launch_command.h"
#include "cli/merge_weights_command.h"
#include "cli/test_command.h"

namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>& args);
};

const Subcommand kSubcommands[] = {
    {"launch", "start a program on several processes (see 'accelerate launch --help')",
     accelerate::cli::run_launch_command},
    {"config",
     "write the config file: questions, 'default' or 'update' (see 'accelerate config --help')",
     accelerate::cli::run_config_command},
    {"env", "print versions, machine and config for a bug report",
     accelerate::cli::run_env_command},
    {"test", "check distributed training works here with your settings",
     accelerate::cli::run_test_command},
    {"estimate-memory", "memory to load and train a model, per dtype",
     accelerate::cli::run_estimate_memory_command},
    {"merge-weights", "a checkpoint's model as safetensors files, merged from every process's",
     accelerate::cli::run_merge_weights_command},
};

void print_help() {
  std::cout << "usage: accelerate COMMAND [ARGS...]\n"
               "       accelerate --help | --version\n\ncommands:\n";
  for (const auto& command : kSubcommands) {
    std::string name = command.name;
    std::cout << "  " << name << std::string(name.size() < 17 ? 17 - name.size() : 1, ' ')
              << command.summary << "\n";
  }
}

int usage_error(const std::string& message) {
  std::cerr << "accelerate: error: " << message << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usage_error("no command given; run 'accelerate --help' to list them");
  const std::string& first = args[0];
  if (first == "--help" || first == "-h" || first == "help") {
    // `accelerate help launch` is `accelerate launch --help`, as git's help is.
    if (first == "help" && args.size() > 1) {
      for (const auto& command : kSubcommands)
        if (args[1] == command.name) return command.run({"--help"});
      return usage_error("no help for '" + args[1] + "': not a command (run 'accelerate --help')");
    }
    print_help();
    return 0;
  }
  if (first == "--version" || first == "-V" || first == "version") {
    std::cout << "accelerate-cpp " << accelerate::kVersion << "\n";
    return 0;
  }
  for (const auto& command : kSubcommands) {
    if (first == command.name) return command.run({args.begin() + 1, args.end()});
  }
  std::string known;
  for (const auto& command : kSubcommands)
    known += (known.empty() ? "" : ", ") + std::string(command.name);
  return usage_error("unknown command '" + first + "'; known commands: " + known +
                     " (run 'accelerate --help')");
}
