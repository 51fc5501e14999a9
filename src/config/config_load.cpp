// Loading a config file: YAML syntax, then keys, then types, then the values
// we cannot run. Each failure is one line naming file, line and key, because
// old files that stop loading after an upgrade with a vague message are a
// known pain for Accelerate's users (Accelerate #832).
#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "accelerate/common/distributed_type.h"
#include "common/settings.h"
#include "config/config_file.h"
#include "config/config_keys.h"
#include "config/config_yaml.h"

namespace accelerate::config {
namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return text;
}

bool is_off(const YAML::Node& node) {
  if (node.IsNull()) return true;
  if (node.IsScalar()) {
    const std::string word = lower(node.Scalar());
    return word == "false" || word == "no" || word == "off";
  }
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (!is_off(node.IsMap() ? it->second : *it)) return false;
  }
  return true;  // every entry off, or empty
}

struct Loader {
  const std::string& path;

  [[noreturn]] void fail(int line, const std::string& problem) const {
    throw ConfigFileError(path + ":" + std::to_string(line) + ": " + problem);
  }

  ConfigValue make_value(const std::string& key, const YAML::Node& key_node,
                         const YAML::Node& value) const {
    ConfigValue result;
    result.key = key;
    result.line = key_node.Mark().line + 1;
    result.is_null = value.IsNull();
    result.is_collection = value.IsMap() || value.IsSequence();
    result.text = result.is_null ? "" : result.is_collection ? flow_text(value) : value.Scalar();
    result.is_off = is_off(value);
    return result;
  }

  // Type check; normalises booleans to "true"/"false".
  void check_type(const KeySpec& spec, const YAML::Node& value, ConfigValue& entry) const {
    const std::string name = "key '" + entry.key + "'";
    if (value.IsNull()) {
      if (spec.nullable) return;
      fail(entry.line, name + " expects " + to_string(spec.type) + ", got null");
    }
    const bool scalar = value.IsScalar();
    const std::string got = value.IsMap()        ? "a mapping"
                            : value.IsSequence() ? "a list"
                                                 : "'" + entry.text + "'";
    switch (spec.type) {
      case KeyType::kString:
        if (!scalar) fail(entry.line, name + " expects a single value, got " + got);
        return;
      case KeyType::kInt: {
        if (scalar) {
          std::istringstream in(entry.text);
          long number = 0;
          if (in >> number && in.peek() == std::char_traits<char>::eof()) return;
        }
        fail(entry.line, name + " expects a whole number, got " + got);
      }
      case KeyType::kBool: {
        if (scalar) {
          const std::string word = lower(entry.text);
          if (word == "true" || word == "yes" || word == "on" || word == "y")
            return void(entry.text = "true");
          if (word == "false" || word == "no" || word == "off" || word == "n")
            return void(entry.text = "false");
        }
        fail(entry.line, name + " expects true or false, got " + got);
      }
      case KeyType::kMapping:
        if (!value.IsMap())
          fail(entry.line, name + " expects a mapping of keys (a section), got " + got);
        return;
      case KeyType::kList:
        if (!value.IsSequence()) fail(entry.line, name + " expects a list, got " + got);
        return;
    }
  }

  void check_compute_environment(const ConfigValue& entry) const {
    if (entry.text == "LOCAL_MACHINE") return;
    if (entry.text == "AMAZON_SAGEMAKER") {
      fail(entry.line,
           "key 'compute_environment' is AMAZON_SAGEMAKER: Amazon SageMaker is not supported by "
           "accelerate-cpp (only LOCAL_MACHINE)");
    }
    fail(entry.line, "key 'compute_environment' has unknown value '" + entry.text +
                         "' (expected LOCAL_MACHINE)");
  }

  void check_distributed_type(ConfigValue& entry) const {
    // PyYAML reads an unquoted NO as false; accept what it would have meant.
    if (entry.text == "no" || entry.text == "false") entry.text = "NO";
    static const std::set<std::string> kOthers = {"XLA",        "TPU",       "MEGATRON_LM",
                                                  "MULTI_NPU",  "MULTI_XPU", "MULTI_MLU",
                                                  "MULTI_MUSA", "MULTI_HPU", "MPS"};
    if (parse_distributed_type(entry.text)) return;  // the types accelerate-cpp runs
    const std::string runs = "NO, MULTI_CPU, MULTI_GPU, DEEPSPEED and FSDP";
    if (kOthers.count(entry.text)) {
      fail(entry.line, "key 'distributed_type' is " + entry.text +
                           ", which accelerate-cpp cannot run (it runs " + runs + ")");
    }
    fail(entry.line, "key 'distributed_type' has unknown value '" + entry.text +
                         "' (accelerate-cpp runs " + runs + ")");
  }

  void check_mixed_precision(ConfigValue& entry) const {
    entry.text = lower(entry.text);
    if (entry.text == "false") entry.text = "no";  // an unquoted `no` read as YAML 1.1 false
    if (parse_mixed_precision(entry.text)) return;
    if (entry.text == "fp8")
      fail(entry.line,
           "key 'mixed_precision' is fp8, which accelerate-cpp does not support (no, fp16, bf16)");
    fail(entry.line, settings::kMixedPrecision.problem("key 'mixed_precision'", entry.text));
  }

  // mpirun_config: mpirun_hostfile is used, mpirun_ccl (oneCCL threads) ignored.
  void split_mpirun_config(const YAML::Node& section, ConfigFile& file) const {
    for (auto it = section.begin(); it != section.end(); ++it) {
      const std::string sub = it->first.Scalar();
      ConfigValue entry = make_value("mpirun_config." + sub, it->first, it->second);
      if (sub == "mpirun_hostfile") {
        if (!it->second.IsScalar())
          fail(entry.line, "key 'mpirun_config.mpirun_hostfile' expects a path");
        file.settings.push_back(entry);
      } else if (sub == "mpirun_ccl") {
        file.ignored.push_back(entry);
      } else {
        fail(entry.line, "unknown key 'mpirun_config." + sub +
                             "' (mpirun_config has mpirun_hostfile and mpirun_ccl)");
      }
    }
  }

  // deepspeed_config and fsdp_config: each key is checked for its name and
  // type here and kept as "section.key"; the launcher judges the values
  // when the section is in effect (distributed_type, --use_deepspeed).
  void split_sharding_section(const std::string& section, const YAML::Node& node,
                              ConfigFile& file) const {
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string sub = it->first.Scalar();
      ConfigValue entry = make_value(section + "." + sub, it->first, it->second);
      const KeySpec* spec = find_section_key(section, sub);
      if (spec == nullptr) {
        const std::string hint = closest_section_key(section, sub);
        fail(entry.line,
             "unknown key '" + entry.key + "'" +
                 (hint.empty() ? "" : " (did you mean '" + section + "." + hint + "'?)") +
                 "; see 'Config file' in docs/cli.md for the keys of " + section);
      }
      check_type(*spec, it->second, entry);
      (spec->use == KeyUse::kSetting ? file.settings : file.ignored).push_back(entry);
    }
  }

  ConfigFile load(const std::string& text) const {
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::ParserException& error) {
      fail(error.mark.line + 1, "not valid YAML: " + error.msg);
    }
    if (root.IsNull())
      fail(
          1,
          "the file is empty; run 'accelerate config' or 'accelerate config default' to write one");
    if (!root.IsMap())
      fail(root.Mark().line + 1, "expected a mapping of config keys (key: value lines)");

    ConfigFile file;
    file.path = path;
    std::set<std::string> seen;
    std::vector<std::pair<ConfigValue, std::string>> unknown;  // entry, suggestion
    std::vector<std::pair<ConfigValue, YAML::Node>> known;
    for (auto it = root.begin(); it != root.end(); ++it) {
      const int line = it->first.Mark().line + 1;
      if (!it->first.IsScalar()) fail(line, "expected a key name");
      const std::string key = it->first.Scalar();
      if (!seen.insert(key).second) fail(line, "key '" + key + "' appears twice");
      ConfigValue entry = make_value(key, it->first, it->second);
      // First: a SageMaker file's other keys are unknown here, and "SageMaker
      // is not supported" says more than "unknown key 'ec2_instance_type'".
      if (key == "compute_environment") {
        check_type(*find_config_key(key), it->second, entry);
        check_compute_environment(entry);
      }
      if (find_config_key(key) == nullptr)
        unknown.emplace_back(entry, closest_config_key(key));
      else
        known.emplace_back(entry, it->second);
    }
    if (!unknown.empty()) {
      const auto& [first, hint] = unknown.front();
      std::string message = "unknown key '" + first.key + "'" +
                            (hint.empty() ? "" : " (did you mean '" + hint + "'?)");
      for (std::size_t i = 1; i < unknown.size(); ++i) {
        message += (i == 1 ? "; also unknown: '" : ", '") + unknown[i].first.key + "' (line " +
                   std::to_string(unknown[i].first.line) + ")";
      }
      fail(first.line, message + "; see 'Config file' in docs/cli.md for the keys");
    }

    bool has_mixed_precision = false;
    for (auto& [entry, node] : known) {
      const KeySpec& spec = *find_config_key(entry.key);
      check_type(spec, node, entry);
      if (entry.key == "distributed_type") check_distributed_type(entry);
      if (entry.key == "mixed_precision" && !entry.is_null) {
        check_mixed_precision(entry);
        has_mixed_precision = true;
      }
      if (entry.key == "mpirun_config" && node.IsMap()) split_mpirun_config(node, file);
      if ((entry.key == "deepspeed_config" || entry.key == "fsdp_config" ||
           entry.key == "parallelism_config") &&
          node.IsMap()) {
        split_sharding_section(entry.key, node, file);
      }
      if (entry.key == "gpu_ids" && lower(entry.text) == "all") entry.text = "all";
      (spec.use == KeyUse::kSetting ? file.settings : file.ignored).push_back(entry);
    }
    // Accelerate before 0.9 wrote `fp16: true` instead of mixed_precision.
    for (const auto& [entry, node] : known) {
      if (entry.key == "fp16" && entry.text == "true" && !has_mixed_precision) {
        ConfigValue translated = entry;
        translated.key = "mixed_precision";
        translated.text = to_string(MixedPrecision::kFP16);
        file.settings.push_back(translated);
      }
    }
    return file;
  }
};

}  // namespace

ConfigFile parse_config_text(const std::string& text, const std::string& path) {
  return Loader{path}.load(text);
}

ConfigFile load_config_file(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    throw ConfigFileError(path + ": cannot read the config file: " + std::strerror(errno));
  }
  if (!S_ISREG(info.st_mode))
    throw ConfigFileError(path + ": the config file is not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigFileError(path + ": cannot read the config file: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_config_text(text.str(), path);
}

const ConfigValue* ConfigFile::find(const std::string& key) const {
  for (const auto& value : settings) {
    if (value.key == key) return &value;
  }
  return nullptr;
}

std::string ConfigFile::where(const ConfigValue& value) const {
  return path + ":" + std::to_string(value.line);
}

}  // namespace accelerate::config
