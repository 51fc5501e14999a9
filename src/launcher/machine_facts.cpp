#include "launcher/machine_facts.h"

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/cpu_info.h"
#include "common/environment_text.h"
#include "common/openblas_core.h"

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

// The variable's value when it is set, even to "": lookup() would report an
// empty value as unset, but an empty list hides every GPU.
std::optional<std::string> set_value(const Environment& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

// The value of `key` in a kfd properties file ("key value" lines).
std::optional<unsigned long long> property(const std::string& properties, const std::string& key) {
  std::istringstream lines(properties);
  std::string name;
  unsigned long long value = 0;
  while (lines >> name >> value) {
    if (name == key) return value;
  }
  return std::nullopt;
}

// gfx_target_version is major*10000 + minor*100 + stepping, and ROCm names
// the ISA "gfx" major minor stepping-in-hex: 90010 is gfx90a (MI250X).
std::string gfx_target_name(unsigned long long version) {
  if (version == 0) return "";
  std::ostringstream name;
  name << "gfx" << version / 10000 << (version / 100) % 100 << std::hex << version % 100;
  return name.str();
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

std::vector<AmdGpuNode> read_amd_gpu_nodes(const std::string& kfd_nodes_dir) {
  std::vector<int> numbers;
  if (DIR* dir = opendir(kfd_nodes_dir.c_str())) {  // no folder: no amdgpu driver, not an error
    while (const dirent* entry = readdir(dir)) {
      if (auto number = detail::parse_digits(entry->d_name)) numbers.push_back(*number);
    }
    closedir(dir);
  }
  std::sort(numbers.begin(), numbers.end());  // numerically: node 10 comes after node 9
  std::vector<AmdGpuNode> gpus;
  for (int number : numbers) {
    const std::string folder = kfd_nodes_dir + "/" + std::to_string(number);
    // A file sysfs refuses (a device cgroup that denies this GPU) reads as
    // "": such a GPU is not usable either.
    const std::string properties = read_text_file(folder + "/properties").value_or("");
    if (property(properties, "simd_count").value_or(0) == 0) continue;  // a CPU node
    AmdGpuNode gpu;
    gpu.node = number;
    gpu.gfx_target = gfx_target_name(property(properties, "gfx_target_version").value_or(0));
    std::string name = read_text_file(folder + "/name").value_or("");
    gpu.name = trim(name.substr(0, name.find('\n')));
    gpus.push_back(gpu);
  }
  return gpus;
}

int count_amd_gpus(const std::string& kfd_nodes_dir) {
  return static_cast<int>(read_amd_gpu_nodes(kfd_nodes_dir).size());
}

int count_visible_amd_gpus(int physical_gpus, const Environment& env) {
  // The ROCm runtime applies ROCR_VISIBLE_DEVICES to the physical GPUs, like
  // CUDA applies CUDA_VISIBLE_DEVICES (first invalid entry ends the list).
  const int runtime_gpus =
      count_visible_gpus(physical_gpus, set_value(env, "ROCR_VISIBLE_DEVICES"));
  // HIP then numbers what is left and takes the first non-empty of its two
  // variables (rocclr: HIP_VISIBLE_DEVICES, else CUDA_VISIBLE_DEVICES).
  std::optional<std::string> hip_list = lookup(env, "HIP_VISIBLE_DEVICES");
  if (!hip_list) hip_list = lookup(env, "CUDA_VISIBLE_DEVICES");
  return count_visible_gpus(runtime_gpus, hip_list);
}

int count_visible_gpus_of_all_vendors(const Environment& env, const GpuDriverFolders& folders) {
  const int nvidia = count_visible_gpus(count_nvidia_gpus(folders.nvidia_gpus),
                                        set_value(env, "CUDA_VISIBLE_DEVICES"));
  return nvidia + count_visible_amd_gpus(count_amd_gpus(folders.amd_kfd_nodes), env);
}

std::optional<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
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
  facts.visible_gpus = count_visible_gpus_of_all_vendors(env);
  facts.usable_cores = count_usable_cpu_cores();
  return facts;
}

std::optional<std::string> probe_faster_openblas_core() {
  const auto picked = detail::openblas_core_of_system_library();
  if (!picked) return std::nullopt;
  return detail::faster_openblas_core(*picked, detail::parse_cpuinfo(detail::read_cpuinfo()).flags);
}

}  // namespace accelerate::launcher
