#include "launcher/program_resolution.h"

#include <sys/stat.h>
#include <unistd.h>

#include "launcher/launch_errors.h"

namespace accelerate::launcher {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_regular_file(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

bool is_directory(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

std::string quoted(const std::string& text) { return "'" + text + "'"; }

std::string require_python(const Environment& environment, const std::string& why) {
  auto python = find_on_path("python3", lookup(environment, "PATH"));
  if (!python) {
    throw LaunchFailure("python3 not found on PATH; it is needed to run " + why +
                        " (install Python, or pass --no_python to run the file as a program)");
  }
  return *python;
}

// A program named by a path: it must be an executable file.
void check_program_path(const std::string& program) {
  if (is_directory(program)) {
    throw UsageError("program " + quoted(program) + " is a directory, not a program");
  }
  if (!is_regular_file(program)) {
    throw UsageError("program " + quoted(program) + " not found (no such file)");
  }
  if (access(program.c_str(), X_OK) != 0) {
    throw UsageError("program " + quoted(program) +
                     " is not executable (chmod +x it, or put its interpreter first)");
  }
}

}  // namespace

bool runs_with_python(const LaunchOptions& options) {
  return options.module || (!options.no_python && ends_with(options.program, ".py"));
}

std::optional<std::string> find_on_path(const std::string& name,
                                        const std::optional<std::string>& path_variable) {
  // Without PATH, use the system's default search path, as execvp does.
  std::string search = path_variable.value_or("/usr/local/bin:/usr/bin:/bin");
  std::string::size_type start = 0;
  while (start <= search.size()) {
    auto colon = search.find(':', start);
    if (colon == std::string::npos) colon = search.size();
    std::string folder = search.substr(start, colon - start);
    if (folder.empty()) folder = ".";  // an empty entry means the current folder
    std::string candidate = folder + "/" + name;
    if (is_regular_file(candidate) && access(candidate.c_str(), X_OK) == 0) return candidate;
    start = colon + 1;
  }
  return std::nullopt;
}

ResolvedCommand resolve_command(const LaunchOptions& options, const Environment& environment) {
  const std::string& program = options.program;
  ResolvedCommand command;
  if (options.module) {
    command.executable = require_python(environment, "module " + quoted(program) + " (-m)");
    command.argv = {"python3", "-m", program};
  } else if (runs_with_python(options)) {
    // Like `python3 train.py`: the script is a path, relative to this folder.
    if (!is_regular_file(program)) {
      throw UsageError("Python script " + quoted(program) + " not found (no such file)");
    }
    command.executable = require_python(environment, "the Python script " + quoted(program));
    command.argv = {"python3", program};
  } else if (program.find('/') != std::string::npos) {
    check_program_path(program);
    command.executable = program;
    command.argv = {program};
  } else {
    auto found = find_on_path(program, lookup(environment, "PATH"));
    if (!found && is_regular_file(program)) {
      // Like a shell, a bare name means PATH; say how to run the local file.
      throw UsageError("program " + quoted(program) +
                       " is not on PATH; to run the file in this folder, write ./" + program);
    }
    if (!found) {
      throw UsageError("program " + quoted(program) + " not found (not a file and not on PATH)");
    }
    command.executable = *found;
    command.argv = {program};
  }
  command.argv.insert(command.argv.end(), options.program_args.begin(), options.program_args.end());
  return command;
}

}  // namespace accelerate::launcher
