// What the `accelerate config` end-to-end tests share: the executable, the
// answers they type and the file those answers must produce.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace accelerate::config {

inline const std::string kCli = ACCELERATE_CLI_PATH;

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

inline std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// What the pipe test answers, and the file it must produce: the current
// Accelerate key set, byte for byte as PyYAML's safe_dump writes it.
// (This machine, multi-GPU, 1 machine, debug, no DeepSpeed, no FSDP, 2 GPUs,
// GPUs 0,1, fp16.)
inline const char kPipedAnswers[] = "0\n2\n1\nyes\nno\nno\n2\n0,1\n1\n";
inline const char kExpectedMultiGpu[] =
    "compute_environment: LOCAL_MACHINE\n"
    "debug: true\n"
    "distributed_type: MULTI_GPU\n"
    "downcast_bf16: 'no'\n"
    "enable_cpu_affinity: false\n"
    "gpu_ids: 0,1\n"
    "machine_rank: 0\n"
    "main_training_function: main\n"
    "mixed_precision: fp16\n"
    "num_machines: 1\n"
    "num_processes: 2\n"
    "rdzv_backend: static\n"
    "same_network: true\n"
    "tpu_env: []\n"
    "tpu_use_cluster: false\n"
    "tpu_use_sudo: false\n"
    "use_cpu: false\n";

}  // namespace accelerate::config
