// `accelerate test [--config_file FILE] [LAUNCH FLAGS...]`: runs the built-in
// sanity program (accelerate-sanity-check) through `accelerate launch` with
// the settings a real job would get (config file, then flags), and ends with
// one clear line: success, or what failed and a non-zero exit code.
//
// The `accelerate` executable links no LibTorch; the sanity program does, so
// it is a separate executable found next to `accelerate` (build tree) or in
// <prefix>/libexec/accelerate (installed).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace accelerate::cli {

constexpr const char* kSanityProgramName = "accelerate-sanity-check";

// Where the sanity program may be, in search order, for an `accelerate`
// executable at `executable_path`.
std::vector<std::string> sanity_program_candidates(const std::string& executable_path);

// This process's executable (/proc/self/exe), or "" when unknown.
std::string current_executable_path();

// The first candidate that is an executable file, or nullopt.
std::optional<std::string> find_sanity_program(const std::string& executable_path);

// Where a LibTorch-linked helper program `name` of an `accelerate` at
// `executable_path` may be (beside it, then libexec), and the first that is
// an executable file.
std::vector<std::string> helper_program_candidates(const std::string& executable_path,
                                                   const std::string& name);
std::optional<std::string> find_helper_program(const std::string& executable_path,
                                               const std::string& name);

// `args` are the arguments after "test". Returns the exit code: 0 success,
// 1 a check or the launch failed, 2 bad flags or config file.
int run_test_command(const std::vector<std::string>& args);

}  // namespace accelerate::cli
