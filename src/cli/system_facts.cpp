#include "cli/system_facts.h"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "launcher/machine_facts.h"
#include "launcher/program_resolution.h"

namespace accelerate::cli {
namespace {

std::string trim(const std::string& text) {
  const auto begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  const auto end = text.find_last_not_of(" \t\r\n");
  return text.substr(begin, end - begin + 1);
}

std::string unquote(std::string value) {
  value = trim(value);
  if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
      value.back() == value.front()) {
    value = value.substr(1, value.size() - 2);
  }
  return value;
}

// "key<sep>value" lines, first occurrence wins, keys trimmed.
std::map<std::string, std::string> key_values(const std::string& text, char separator) {
  std::map<std::string, std::string> values;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto at = line.find(separator);
    if (at == std::string::npos) continue;
    values.emplace(trim(line.substr(0, at)), trim(line.substr(at + 1)));
  }
  return values;
}

}  // namespace

std::optional<std::string> os_pretty_name(const std::string& os_release) {
  const auto values = key_values(os_release, '=');
  auto find = [&](const char* key) -> std::string {
    auto it = values.find(key);
    return it == values.end() ? "" : unquote(it->second);
  };
  if (!find("PRETTY_NAME").empty()) return find("PRETTY_NAME");
  std::string name = trim(find("NAME") + " " + find("VERSION"));
  if (name.empty()) return std::nullopt;
  return name;
}

std::vector<std::string> notable_cpu_flags(const std::vector<std::string>& flags) {
  static const char* const kNotable[] = {"avx",         "avx2",     "fma",         "f16c",
                                         "avx512f",     "avx512bw", "avx512_vnni", "avx512_bf16",
                                         "avx512_fp16", "amx_tile", "amx_bf16",    "amx_int8",
                                         "asimd",       "sve",      "bf16"};
  std::vector<std::string> present;
  for (const char* flag : kNotable) {
    if (std::find(flags.begin(), flags.end(), flag) != flags.end()) present.push_back(flag);
  }
  return present;
}

std::optional<uint64_t> total_memory_bytes(const std::string& meminfo) {
  const auto values = key_values(meminfo, ':');
  auto it = values.find("MemTotal");
  if (it == values.end()) return std::nullopt;
  unsigned long long kib = 0;
  if (std::sscanf(it->second.c_str(), "%llu", &kib) != 1) return std::nullopt;
  return static_cast<uint64_t>(kib) * 1024;
}

namespace {

// The NVIDIA GPUs: nvidia-smi's own lines, else the driver's /proc files.
std::vector<std::string> list_nvidia_gpus(const std::optional<std::string>& path_variable,
                                          const std::string& proc_gpus_dir) {
  std::vector<std::string> gpus;
  if (auto smi = launcher::find_on_path("nvidia-smi", path_variable)) {
    // The path comes from PATH and is quoted for the shell popen starts.
    std::string quoted = "'";
    for (char c : *smi) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    quoted += "'";
    if (FILE* pipe = ::popen((quoted + " -L 2>/dev/null").c_str(), "r")) {
      char line[512];
      while (std::fgets(line, sizeof line, pipe)) {
        std::string text = trim(line);
        if (text.rfind("GPU ", 0) == 0) gpus.push_back(text);
      }
      ::pclose(pipe);
    }
    if (!gpus.empty()) return gpus;
  }
  std::vector<std::string> entries;
  if (DIR* dir = ::opendir(proc_gpus_dir.c_str())) {
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] != '.') entries.push_back(entry->d_name);
    }
    ::closedir(dir);
  }
  std::sort(entries.begin(), entries.end());
  for (const auto& bus_id : entries) {
    const auto info = launcher::read_text_file(proc_gpus_dir + "/" + bus_id + "/information");
    const auto values = key_values(info.value_or(""), ':');
    auto model = values.find("Model");
    gpus.push_back("GPU " + std::to_string(gpus.size()) + ": " +
                   (model == values.end() ? std::string("unknown model") : model->second) + " (" +
                   bus_id + ")");
  }
  return gpus;
}

// "GPU 1: AMD GPU gfx90a (name aldebaran, kfd node 3)", numbered as ROCm
// numbers them when no variable hides any. The gfx target is what tells a
// user which LibTorch build fits; the name file is whatever the kernel put
// there (an ASIC name, or "ip discovery" on newer kernels), shown as it is.
std::vector<std::string> list_amd_gpus(const std::string& kfd_nodes_dir) {
  std::vector<std::string> gpus;
  for (const auto& node : launcher::read_amd_gpu_nodes(kfd_nodes_dir)) {
    std::string line = "GPU " + std::to_string(gpus.size()) + ": AMD GPU";
    if (!node.gfx_target.empty()) line += " " + node.gfx_target;
    line += " (";
    if (!node.name.empty() && node.name != node.gfx_target) line += "name " + node.name + ", ";
    line += "kfd node " + std::to_string(node.node) + ")";
    gpus.push_back(line);
  }
  return gpus;
}

}  // namespace

std::vector<std::string> list_gpus(const std::optional<std::string>& path_variable,
                                   const std::string& proc_gpus_dir,
                                   const std::string& kfd_nodes_dir) {
  std::vector<std::string> gpus = list_nvidia_gpus(path_variable, proc_gpus_dir);
  for (auto& line : list_amd_gpus(kfd_nodes_dir)) gpus.push_back(std::move(line));
  return gpus;
}

}  // namespace accelerate::cli
