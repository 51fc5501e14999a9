#include "accelerate/common/environment.h"

extern char** environ;

namespace accelerate {

Environment current_environment() {
  Environment env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string line(*entry);
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(line.substr(0, eq), line.substr(eq + 1));
  }
  return env;
}

std::optional<std::string> lookup(const Environment& env, const std::string& key) {
  auto it = env.find(key);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

}  // namespace accelerate
