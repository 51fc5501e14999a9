#include "common/cpu_info.h"

#include <fstream>
#include <sstream>

namespace accelerate {
namespace detail {
namespace {

std::string trimmed(const std::string& text) {
  const auto begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t\r\n") - begin + 1);
}

}  // namespace

CpuInfo parse_cpuinfo(const std::string& cpuinfo) {
  CpuInfo info;
  std::istringstream in(cpuinfo);
  std::string line;
  bool flags_done = false;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trimmed(line.substr(0, colon));
    const std::string value = trimmed(line.substr(colon + 1));
    if (key == "processor") ++info.logical_cpus;
    if (info.model.empty() && (key == "model name" || key == "Hardware" || key == "cpu model"))
      info.model = value;
    if (!flags_done && (key == "flags" || key == "Features")) {
      std::istringstream words(value);
      for (std::string flag; words >> flag;) info.flags.push_back(flag);
      flags_done = true;
    }
  }
  return info;
}

std::string read_cpuinfo(const char* path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return in ? text.str() : std::string();
}

}  // namespace detail
}  // namespace accelerate
