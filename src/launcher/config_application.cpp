#include "launcher/config_application.h"
#include "common/sharding_launch_settings.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "common/environment_text.h"
#include "config/config_keys.h"
#include "launcher/launch_errors.h"
#include "sharding/deepspeed_config.h"

namespace accelerate::launcher {
namespace {

using config::ConfigFile;
using config::ConfigValue;
using config::KeySpec;

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return text;
}

// True when an ignored key's value asks for nothing: Accelerate writes most
// of these keys in every file with the feature off.
bool is_inert(const ConfigValue& value, const KeySpec& spec) {
  if (value.is_off) return true;
  const std::string text = lower(value.text);
  if (spec.inert_value != nullptr) {
    const std::string inert = lower(spec.inert_value);
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
      notes_.push_back(file_.where(from) + ": key '" + from.key +
                       "' is not applied: accelerate launch has no --" + flag + " option");
      return;
    }
    spec->apply(options_, file_.where(from) + ": key '" + from.key + "'", text);
    options_.sources[flag] = OptionSource::kConfigFile;
    options_.origins[flag] = settings::Origin::config_key(from.key, file_.path, from.line);
  }

  // A plain one-to-one key; null means "not set" (Accelerate writes
  // main_process_ip: null on one machine).
  void copy(const std::string& key, const std::string& flag) {
    const ConfigValue* value = file_.find(key);
    if (value != nullptr && !value->is_null) set(flag, *value, value->text);
  }

  bool set_by_flag(const std::string& name) const {
    return options_.source_of(name) == OptionSource::kFlag;
  }

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
    if (type != nullptr && type->text == "NO" && file_.find("num_processes") == nullptr)
      set("num_processes", *type, "1");
  }

  // DEEPSPEED and FSDP choose sharded training, unless a flag chose the
  // other kind (a flag replaces the file's choice, as --cpu replaces MULTI_GPU).
  void sharding_kind() {
    const ConfigValue* type = file_.find("distributed_type");
    if (type == nullptr || set_by_flag("use_deepspeed") || set_by_flag("use_fsdp")) return;
    if (type->text == "DEEPSPEED") set("use_deepspeed", *type, "true");
    if (type->text == "FSDP") set("use_fsdp", *type, "true");
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

  // deepspeed_config and fsdp_config: applied when that kind of sharding is
  // in use, else ignored with a note when they ask for something.
  void sharding_sections() {
    section_in_use("deepspeed_config", options_.use_deepspeed, "use_fsdp", "DEEPSPEED");
    section_in_use("fsdp_config", options_.use_fsdp, "use_deepspeed", "FSDP");
    if (options_.use_deepspeed) {
      for (const std::string& key : settings::sharding_setting_names("deepspeed_config")) {
        copy_section("deepspeed_config", key, key);
      }
      accumulation_steps();
      keys_beside_config_file();
      list_ignored("deepspeed_config");
    }
    if (options_.use_fsdp) {
      for (const std::string& key : settings::sharding_setting_names("fsdp_config")) {
        copy_section("fsdp_config", key, key);
      }
      // The old name, when the file has no fsdp_backward_prefetch.
      copy_section("fsdp_config", "fsdp_backward_prefetch_policy", "fsdp_backward_prefetch");
      list_ignored("fsdp_config");
    }
    parallelism_section();
  }

  // Accelerate 1.x's parallelism_config: a section that sets any size puts
  // the sizes in use (as its launcher's --use_parallelism_config), unless a
  // flag already gave them.
  void parallelism_section() {
    const ConfigValue* section = file_.find("parallelism_config");
    if (section == nullptr || section->is_off || section->is_null) return;
    if (!set_by_flag("use_parallelism_config")) set("use_parallelism_config", *section, "true");
    if (!options_.use_parallelism_config) return;
    for (const std::string& key : settings::sharding_setting_names("parallelism_config")) {
      copy_section("parallelism_config", key, key);
    }
    list_ignored("parallelism_config");
  }

  void ignored() {
    for (const auto& value : file_.ignored) {
      if (value.key == "mpirun_config.mpirun_ccl") {
        if (value.text != "1") {
          notes_.push_back(
              file_.where(value) +
              ": mpirun_config.mpirun_ccl is ignored: oneCCL is not used by accelerate-cpp");
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
  // A key of `section` by its current name (fsdp_config's old unprefixed
  // names too), among the used or the ignored keys; nullptr when absent.
  const ConfigValue* find_section(const std::string& section, const std::string& name) const {
    for (const auto* list : {&file_.settings, &file_.ignored}) {
      for (const auto& value : *list) {
        if (value.key.rfind(section + ".", 0) != 0) continue;
        const KeySpec* spec =
            config::find_section_key(section, value.key.substr(section.size() + 1));
        if (spec != nullptr && section + "." + name == spec->name) return &value;
      }
    }
    return nullptr;
  }

  void copy_section(const std::string& section, const std::string& name, const std::string& flag) {
    const ConfigValue* value = find_section(section, name);
    if (value != nullptr && !value->is_null) set(flag, *value, value->text);
  }

  void section_in_use(const std::string& section, bool in_use, const std::string& other_flag,
                      const std::string& type_name) {
    const ConfigValue* value = file_.find(section);
    if (in_use || value == nullptr || value->is_off) return;
    const ConfigValue* type = file_.find("distributed_type");
    const std::string why = set_by_flag(other_flag) ? "--" + other_flag + " was given"
                            : type == nullptr
                                ? "the file has no distributed_type"
                                : "distributed_type is " + type->text + ", not " + type_name;
    notes_.push_back(file_.where(*value) + ": " + section + " is ignored: " + why);
  }

  // Accelerate's DeepSpeed launcher takes gradient_accumulation_steps from
  // deepspeed_config. --gradient_accumulation_steps is the launcher's own
  // flag for every kind of job; both say what the script does, so two
  // different numbers are a mistake in one of them, not an override.
  void accumulation_steps() {
    const ConfigValue* value = find_section("deepspeed_config", "gradient_accumulation_steps");
    if (value == nullptr || value->is_null) return;
    if (!set_by_flag("gradient_accumulation_steps"))
      return set("gradient_accumulation_steps", *value, value->text);
    LaunchOptions from_file;
    const std::string subject = file_.where(*value) + ": key '" + value->key + "'";
    find_launch_flag("gradient_accumulation_steps")->apply(from_file, subject, value->text);
    if (from_file.gradient_accumulation_steps != options_.gradient_accumulation_steps) {
      throw UsageError(subject + " is " + value->text + " but --gradient_accumulation_steps is " +
                       std::to_string(*options_.gradient_accumulation_steps) +
                       "; give the same number in both, or only one of them");
    }
  }

  // Accelerate refuses deepspeed_config keys (and a mixed_precision the
  // flags do not override) beside a DeepSpeed config file, which replaces them.
  void keys_beside_config_file() {
    if (!options_.deepspeed_config_file) return;
    const std::string prefix = "deepspeed_config.";
    std::vector<std::string> keys;
    for (const auto* list : {&file_.settings, &file_.ignored}) {
      for (const auto& value : *list) {
        if (value.key.rfind(prefix, 0) == 0 && !value.is_null)
          keys.push_back(value.key.substr(prefix.size()));
      }
    }
    const ConfigValue* precision = file_.find("mixed_precision");
    if (precision != nullptr && !precision->is_null && !set_by_flag("mixed_precision")) {
      keys.push_back("mixed_precision");
    }
    try {
      sharding::check_keys_beside_config_file(keys, file_.path, *options_.deepspeed_config_file);
    } catch (const ConfigError& error) {
      throw UsageError(error.what());
    }
  }

  // One note for the keys of `section` that ask for something we ignore,
  // grouped by reason: "accelerate-cpp ignores a, b (why); c (why)".
  void list_ignored(const std::string& section) {
    std::vector<std::pair<std::string, std::string>> groups;  // reason, keys
    for (const auto& value : file_.ignored) {
      if (value.key.rfind(section + ".", 0) != 0) continue;
      const std::string name = value.key.substr(section.size() + 1);
      const KeySpec* spec = config::find_section_key(section, name);
      if (spec == nullptr || spec->reason == nullptr || is_inert(value, *spec)) continue;
      auto group = std::find_if(groups.begin(), groups.end(),
                                [&](const auto& g) { return g.first == spec->reason; });
      if (group == groups.end()) group = groups.insert(groups.end(), {spec->reason, ""});
      group->second += (group->second.empty() ? "" : ", ") + name;
    }
    const ConfigValue* where = file_.find(section);
    if (groups.empty() || where == nullptr) return;
    std::string text;
    for (const auto& [reason, keys] : groups)
      text += (text.empty() ? "" : "; ") + keys + " (" + reason + ")";
    notes_.push_back(file_.where(*where) + ": " + section + ": accelerate-cpp ignores " + text);
  }

  const ConfigFile& file_;
  LaunchOptions& options_;
  std::vector<std::string> notes_;
};

}  // namespace

std::vector<std::string> apply_config_file(const ConfigFile& file, LaunchOptions& options) {
  Applier applier(file, options);
  applier.machine_type();
  applier.sharding_kind();
  applier.counts();
  applier.rest();
  applier.sharding_sections();
  applier.ignored();
  return applier.take_notes();
}

}  // namespace accelerate::launcher
