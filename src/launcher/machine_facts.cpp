#include "launcher/machine_facts.h"

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "common/environment_text.h"

namespace accelerate::launcher {
namespace {

std::string trim(const std::string& text) {
  auto begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  auto end = text.find_last_not_of(" \t");
  return text.substr(begin, end - begin + 1);
}

// One CUDA_VISIBLE_DEVICES entry: an index below the GPU count, or a GPU/MIG
// UUID (we cannot check UUIDs without the driver, so we trust them).
bool is_valid_device_entry(const std::string& entry, int physical_gpus) {
  if (entry.rfind("GPU-", 0) == 0 || entry.rfind("MIG-", 0) == 0) return true;
  const auto index = detail::parse_digits(entry);
  return index && *index < physical_gpus;
}

}  // namespace

int count_visible_gpus(int physical_gpus, const std::optional<std::string>& cuda_visible_devices) {
  if (!cuda_visible_devices) return physical_gpus;
  int visible = 0;
  std::string::size_type start = 0;
  const std::string& list = *cuda_visible_devices;
  while (start <= list.size()) {
    auto comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    if (!is_valid_device_entry(trim(list.substr(start, comma - start)), physical_gpus)) break;
    ++visible;
    start = comma + 1;
  }
  return std::min(visible, physical_gpus);
}

int count_nvidia_gpus(const std::string& proc_dir) {
  DIR* dir = opendir(proc_dir.c_str());
  if (dir == nullptr) return 0;  // no driver: no GPUs, not an error
  int count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count;
}

int count_usable_cpu_cores() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0) {
    int cores = CPU_COUNT(&mask);
    if (cores > 0) return cores;
  }
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

MachineFacts probe_machine(const Environment& env) {
  MachineFacts facts;
  // Look the variable up directly: an empty CUDA_VISIBLE_DEVICES means "no
  // GPUs", which accelerate::lookup() would report as unset.
  auto it = env.find("CUDA_VISIBLE_DEVICES");
  std::optional<std::string> visible;
  if (it != env.end()) visible = it->second;
  facts.visible_gpus = count_visible_gpus(count_nvidia_gpus(), visible);
  facts.usable_cores = count_usable_cpu_cores();
  return facts;
}

}  // namespace accelerate::launcher
