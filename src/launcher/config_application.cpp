#include "launcher/config_application.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "common/environment_text.h"
#include "config/config_keys.h"

namespace accelerate::launcher {
namespace {

using config::ConfigFile;
using config::ConfigValue;
using config::KeySpec;

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// True when an ignored key's value asks for nothing: Accelerate writes most
// of these keys in every file with the feature off.
bool is_inert(const ConfigValue& value, const KeySpec& spec) {
  if (value.is_off) return true;
  const std::string text = lower(value.text);
  if (spec.inert_value != nullptr) {
    const std::string inert = spec.inert_value;
    if (text == inert || (inert == "no" && text == "false")) return true;
  }
  return false;
}

class Applier {
 public:
  Applier(const ConfigFile& file, LaunchOptions& options) : file_(file), options_(options) {}

  // Stores `text` into the launch option `flag` unless a flag already set it.
  void set(const std::string& flag, const ConfigValue& from, const std::string& text) {
    if (options_.source_of(flag) != OptionSource::kDefault) return;
    const FlagSpec* spec = find_launch_flag(flag);
    if (spec == nullptr) {
      notes_.push_back(file_.where(from) + ": key '" + from.key + "' is not applied: accelerate launch has no --" +
                       flag + " option");
      return;
    }
    spec->apply(options_, file_.where(from) + ": key '" + from.key + "'", text);
    options_.sources[flag] = OptionSource::kConfigFile;
  }

  // A plain one-to-one key; null means "not set" (Accelerate writes
  // main_process_ip: null on one machine).
  void copy(const std::string& key, const std::string& flag) {
    const ConfigValue* value = file_.find(key);
    if (value != nullptr && !value->is_null) set(flag, *value, value->text);
  }

  bool set_by_flag(const std::string& name) const { return options_.source_of(name) == OptionSource::kFlag; }

  void machine_type() {
    const ConfigValue* type = file_.find("distributed_type");
    const ConfigValue* use_cpu = file_.find("use_cpu");
    const bool multi_cpu = type != nullptr && type->text == "MULTI_CPU";
    const bool cpu = multi_cpu || (use_cpu != nullptr && use_cpu->text == "true");
    // A machine type given as a flag replaces the file's, not merges with it.
    const bool gpu_flag = set_by_flag("multi_gpu");
    const bool cpu_flag = set_by_flag("cpu") && options_.cpu;
    if ((multi_cpu || use_cpu != nullptr) && !gpu_flag) {
      set("cpu", multi_cpu ? *type : *use_cpu, cpu ? "true" : "false");
    }
    if (type != nullptr && type->text == "MULTI_GPU" && !cpu_flag) set("multi_gpu", *type, "true");
    // Accelerate runs one process for NO when the file gives no count.
    if (type != nullptr && type->text == "NO" && file_.find("num_processes") == nullptr) set("num_processes", *type, "1");
  }

  void counts() {
    // -1 is Accelerate's "not set" (ClusterConfig's default); 0 reaches the
    // flag row, which rejects it with file, line and key.
    const ConfigValue* processes = file_.find("num_processes");
    const auto count = processes == nullptr ? std::nullopt : detail::parse_integer(processes->text);
    if (processes != nullptr && !processes->is_null && (!count || *count >= 0)) {
      set("num_processes", *processes, processes->text);
    }
    copy("num_machines", "num_machines");
    copy("machine_rank", "machine_rank");
  }

  void rest() {
    copy("mixed_precision", "mixed_precision");
    copy("debug", "debug");
    copy("main_process_ip", "main_process_ip");
    copy("main_process_port", "main_process_port");
    copy("gpu_ids", "gpu_ids");  // "all" (the default answer) leaves CUDA_VISIBLE_DEVICES alone
    copy("rdzv_backend", "rdzv_backend");
    copy("same_network", "same_network");
    copy("mpirun_config.mpirun_hostfile", "mpirun_hostfile");
  }

  void ignored() {
    for (const auto& value : file_.ignored) {
      if (value.key == "mpirun_config.mpirun_ccl") {
        if (value.text != "1") {
          notes_.push_back(file_.where(value) + ": mpirun_config.mpirun_ccl is ignored: oneCCL is not used by accelerate-cpp");
        }
        continue;
      }
      const KeySpec* spec = config::find_config_key(value.key);
      if (spec == nullptr || spec->reason == nullptr || is_inert(value, *spec)) continue;
      notes_.push_back(file_.where(value) + ": " + value.key + " is ignored: " + spec->reason);
    }
  }

  std::vector<std::string> take_notes() { return std::move(notes_); }

 private:
  const ConfigFile& file_;
  LaunchOptions& options_;
  std::vector<std::string> notes_;
};

}  // namespace

std::vector<std::string> apply_config_file(const ConfigFile& file, LaunchOptions& options) {
  Applier applier(file, options);
  applier.machine_type();
  applier.counts();
  applier.rest();
  applier.ignored();
  return applier.take_notes();
}

}  // namespace accelerate::launcher
