#include "cli/config_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "accelerate/common/environment.h"
#include "accelerate/common/errors.h"
#include "common/settings.h"
#include "config/config_file.h"
#include "config/config_files.h"
#include "config/questionnaire.h"
#include "launcher/machine_facts.h"

namespace accelerate::cli {
namespace {

// The command is the config area's front end and speaks its types throughout.
using namespace config;

constexpr int kUsageExit = 2;
constexpr int kFailureExit = 1;

class ConfigUsageError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

struct ConfigArguments {
  std::string mode;  // "", "default" or "update"
  std::optional<std::string> config_file;
  std::string mixed_precision = "no";
  bool help = false;
};

const char kHelp[] =
    "usage: accelerate config [--config_file PATH]\n"
    "       accelerate config default [--config_file PATH] [--mixed_precision no|fp16|bf16]\n"
    "       accelerate config update [--config_file PATH]\n"
    "\n"
    "  (no subcommand)  answer a few questions; writes the config file (replacing it)\n"
    "  default          write a basic config for this machine without questions;\n"
    "                   leaves an existing file as it is (and exits 0)\n"
    "  update           rewrite an existing config file with the current keys, keeping its values\n"
    "\n"
    "  --config_file PATH        the file to write (default: "
    "$HF_HOME/accelerate/default_config.yaml,\n"
    "                            else "
    "${XDG_CACHE_HOME:-~/.cache}/huggingface/accelerate/default_config.yaml)\n"
    "  --mixed_precision MODE    for 'default': no, fp16 or bf16 (default no)\n"
    "\n"
    "The file has Hugging Face Accelerate's format and keys; see docs/cli.md.\n";

ConfigArguments parse_arguments(const std::vector<std::string>& args) {
  ConfigArguments parsed;
  std::size_t i = 0;
  if (i < args.size() && (args[i] == "default" || args[i] == "update")) parsed.mode = args[i++];
  for (; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "-h" || arg == "--help") {
      parsed.help = true;
      continue;
    }
    std::optional<std::string> inline_value;
    if (auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    for (auto& c : arg) c = c == '-' ? '_' : c;  // --config-file is --config_file
    auto value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      if (i + 1 >= args.size()) throw ConfigUsageError(args[i] + " expects a value");
      return args[++i];
    };
    if (arg == "__config_file") {
      parsed.config_file = value();
      if (parsed.config_file->empty())
        throw ConfigUsageError("--config_file expects a path, got an empty value");
    } else if (arg == "__mixed_precision" && parsed.mode == "default") {
      parsed.mixed_precision = value();
      if (!settings::kMixedPrecision.try_parse(parsed.mixed_precision)) {
        throw ConfigUsageError(
            settings::kMixedPrecision.problem("--mixed_precision", parsed.mixed_precision));
      }
    } else {
      throw ConfigUsageError("unknown argument '" + args[i] + "'; see 'accelerate config --help'");
    }
  }
  return parsed;
}

bool exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

int run_questionnaire(const std::string& path, const Environment& env) {
  const bool terminal = ::isatty(STDIN_FILENO) && ::isatty(STDOUT_FILENO);
  auto prompter = terminal ? make_terminal_prompter(STDIN_FILENO, STDOUT_FILENO)
                           : make_line_prompter(std::cin, std::cout);
  ClusterAnswers answers = ask_cluster_questions(*prompter, home_directory(env));
  write_config_file(path, to_config_node(answers));
  std::cout << "accelerate configuration saved at " << path << "\n";
  return 0;
}

int write_default(const std::string& path, const std::string& mixed_precision,
                  const Environment& env) {
  if (exists(path)) {
    // As Hugging Face's: success, so that a setup script can run it twice.
    std::cout << "accelerate config: a config file already exists at " << path
              << "; not overwriting it (edit it with 'accelerate config', refresh it with "
                 "'accelerate config update', or pass another --config_file)\n";
    return 0;
  }
  const int gpus = launcher::probe_machine(env).visible_gpus;
  write_config_file(path, default_config_node(mixed_precision, gpus));
  std::cout << "accelerate configuration saved at " << path << "\n";
  return 0;
}

int update(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::cerr << "accelerate config: error: " << path
              << ": no config file to update (write one with 'accelerate config' or 'accelerate "
                 "config default')\n";
    return kFailureExit;
  }
  std::ostringstream text;
  text << in.rdbuf();
  in.close();
  write_config_file(path, updated_config_node(text.str(), path));
  std::cout << "Successfully updated the configuration file at " << path << "\n";
  return 0;
}

}  // namespace

int run_config_command(const std::vector<std::string>& args) {
  try {
    const ConfigArguments parsed = parse_arguments(args);
    if (parsed.help) {
      std::cout << kHelp;
      return 0;
    }
    const Environment env = current_environment();
    const std::string path = parsed.config_file.value_or(default_config_file(env));
    if (parsed.mode == "default") return write_default(path, parsed.mixed_precision, env);
    if (parsed.mode == "update") return update(path);
    return run_questionnaire(path, env);
  } catch (const ConfigUsageError& error) {
    std::cerr << "accelerate config: error: " << error.what() << "\n";
    return kUsageExit;
  } catch (const std::exception& error) {
    std::cerr << "accelerate config: error: " << error.what() << "\n";
    return kFailureExit;
  }
}

}  // namespace accelerate::cli
