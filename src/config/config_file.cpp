#include "config/config_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include "config/config_files.h"

namespace accelerate::config {
namespace {

// "~" and "~/x" as Python's os.path.expanduser does them.
std::string expand_user(const std::string& path, const Environment& env) {
  if (path == "~" || path.rfind("~/", 0) == 0) return home_directory(env) + path.substr(1);
  return path;
}

bool is_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

}  // namespace

std::string default_config_file(const Environment& env) {
  std::string cache_home;
  if (auto hf_home = lookup(env, "HF_HOME")) {
    cache_home = expand_user(*hf_home, env);
  } else {
    std::string xdg = lookup(env, "XDG_CACHE_HOME").value_or("~/.cache");
    cache_home = expand_user(xdg, env) + "/huggingface";
  }
  return cache_home + "/accelerate/default_config.yaml";
}

std::optional<std::string> config_file_to_use(const std::optional<std::string>& explicit_path,
                                              const Environment& env) {
  if (explicit_path) {
    if (!is_file(*explicit_path)) {
      throw ConfigFileError(*explicit_path +
                            ": the config file given with --config_file does not exist");
    }
    return explicit_path;
  }
  std::string path = default_config_file(env);
  if (is_file(path)) return path;
  return std::nullopt;
}

std::vector<std::string> describe_config_file(const ConfigFile& file) {
  std::vector<std::string> lines;
  auto show = [](const ConfigValue& value) {
    return value.is_null ? std::string("null") : value.text;
  };
  for (const auto& value : file.settings) {
    // mpirun_config's parts show inside mpirun_config itself.
    if (value.key.find('.') == std::string::npos) lines.push_back(value.key + ": " + show(value));
  }
  for (const auto& value : file.ignored) {
    if (value.key.find('.') != std::string::npos) continue;
    const std::string mark =
        value.key == "fp16" ? " (old key, read as mixed_precision)" : " (ignored)";
    lines.push_back(value.key + ": " + show(value) + mark);
  }
  return lines;
}

}  // namespace accelerate::config
