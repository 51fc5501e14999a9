#include "config/config_files.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "accelerate/common/errors.h"
#include "common/replace_file.h"
#include "config/config_file.h"
#include "config/config_keys.h"
#include "config/config_yaml.h"
#include "config/questionnaire.h"

namespace accelerate::config {
namespace {

// Keys current Accelerate always writes, with the value that asks for nothing.
void fill_missing(YAML::Node& root, const std::string& key, const YAML::Node& value) {
  const YAML::Node& view = root;
  if (!view[key]) root[key] = value;
}

void make_directories(const std::string& path) {
  for (std::size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      throw Error("cannot create the folder " + prefix + ": " + std::strerror(errno));
    }
  }
}

}  // namespace

std::string home_directory(const Environment& env) {
  if (auto home = lookup(env, "HOME")) return *home;
  if (const passwd* entry = ::getpwuid(::getuid())) return entry->pw_dir;
  return "/";
}

YAML::Node default_config_node(const std::string& mixed_precision, int gpus) {
  ClusterAnswers answers;
  answers.mixed_precision = mixed_precision;
  if (gpus > 1) {
    answers.distributed_type = "MULTI_GPU";
    answers.num_processes = gpus;
  } else {
    answers.use_cpu = gpus == 0;
  }
  return to_config_node(answers);
}

YAML::Node updated_config_node(const std::string& text, const std::string& path) {
  const ConfigFile checked = parse_config_text(text, path);
  // const: a non-const operator[] would add keys to the map being iterated.
  const YAML::Node original = YAML::Load(text);
  YAML::Node root(YAML::NodeType::Map);
  for (auto it = original.begin(); it != original.end(); ++it) {
    const std::string key = it->first.Scalar();
    const YAML::Node& value = it->second;
    // Accelerate drops None values and empty sections when it writes a file.
    if (value.IsNull() || (value.IsMap() && value.size() == 0)) continue;
    if (key == "fp16") continue;  // read as mixed_precision below
    if (key == "dynamo_backend") {
      const std::string backend = value.Scalar();
      if (backend != "no" && backend != "NO" && !original["dynamo_config"]) {
        root["dynamo_config"]["dynamo_backend"] = string_node(backend);
      }
      continue;
    }
    root[key] = value;
  }
  // The values as load_config_file understood them (normalised spellings).
  for (const auto& value : checked.settings) {
    const KeySpec* spec = find_config_key(value.key);
    if (spec == nullptr || value.is_null || value.is_collection) continue;
    if (spec->type == KeyType::kBool) root[value.key] = value.text == "true";
    if (value.key == "distributed_type" || value.key == "mixed_precision")
      root[value.key] = string_node(value.text);
  }
  const YAML::Node& view = root;  // look-ups that must not add keys
  if (!view["distributed_type"]) {
    // Accelerate cannot read a file without one; say what the file meant.
    const int processes = view["num_processes"] ? view["num_processes"].as<int>() : 1;
    const bool cpu = view["use_cpu"] && view["use_cpu"].as<bool>();
    root["distributed_type"] = string_node(processes <= 1 ? "NO" : cpu ? "MULTI_CPU" : "MULTI_GPU");
  }
  if (!view["num_processes"] && view["distributed_type"].Scalar() == "NO")
    root["num_processes"] = 1;
  fill_missing(root, "compute_environment", string_node("LOCAL_MACHINE"));
  fill_missing(root, "debug", YAML::Node(false));
  fill_missing(root, "downcast_bf16", string_node("no"));
  fill_missing(root, "enable_cpu_affinity", YAML::Node(false));
  fill_missing(root, "machine_rank", YAML::Node(0));
  fill_missing(root, "main_training_function", string_node("main"));
  // Beside a DeepSpeed config file, which has its own fp16/bf16, Accelerate
  // writes no mixed_precision (and refuses one).
  const YAML::Node json_file =
      view["deepspeed_config"] ? view["deepspeed_config"]["deepspeed_config_file"] : YAML::Node();
  const bool precision_in_json = view["distributed_type"].Scalar() == "DEEPSPEED" && json_file &&
                                 json_file.IsScalar() && json_file.Scalar() != "none";
  if (!precision_in_json) fill_missing(root, "mixed_precision", string_node("no"));
  fill_missing(root, "num_machines", YAML::Node(1));
  fill_missing(root, "rdzv_backend", string_node("static"));
  fill_missing(root, "tpu_env", YAML::Node(YAML::NodeType::Sequence));
  fill_missing(root, "tpu_use_cluster", YAML::Node(false));
  fill_missing(root, "tpu_use_sudo", YAML::Node(false));
  fill_missing(root, "use_cpu", YAML::Node(false));
  return root;
}

void write_config_file(const std::string& path, const YAML::Node& root) {
  make_directories(path);
  const bool json = path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  detail::replace_file(path, json ? to_config_json(root) : to_config_yaml(root), "config file");
}

}  // namespace accelerate::config
