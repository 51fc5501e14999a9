// A snapshot of the process environment as a plain map, so every parser in
// the library is a pure function of its input and tests need no setenv().
#pragma once

#include <map>
#include <optional>
#include <string>

namespace accelerate {

using Environment = std::map<std::string, std::string>;

// The current process's environment (environ), copied.
Environment current_environment();

// The value of `key`, or nullopt when it is unset or empty.
std::optional<std::string> lookup(const Environment& env, const std::string& key);

}  // namespace accelerate
