#include "config/config_keys.h"

#include <algorithm>

#include "accelerate/detail/enum_names.h"
#include "common/edit_distance.h"
#include "common/sharding_launch_settings.h"

namespace accelerate::config {
namespace {

constexpr KeyType S = KeyType::kString, I = KeyType::kInt, B = KeyType::kBool,
                  M = KeyType::kMapping, L = KeyType::kList;
constexpr KeyUse kUse = KeyUse::kSetting, kIgn = KeyUse::kIgnored, kOld = KeyUse::kLegacy;

const std::vector<KeySpec> kKeys = {
    // What accelerate-cpp runs.
    {"compute_environment", S, kUse, false, nullptr, nullptr},
    {"distributed_type", S, kUse, false, nullptr, nullptr},
    {"mixed_precision", S, kUse, true, nullptr, nullptr},
    {"use_cpu", B, kUse, false, nullptr, nullptr},
    {"debug", B, kUse, false, nullptr, nullptr},
    {"num_processes", I, kUse, true, nullptr, nullptr},
    {"machine_rank", I, kUse, false, nullptr, nullptr},
    {"num_machines", I, kUse, false, nullptr, nullptr},
    {"gpu_ids", S, kUse, true, nullptr, nullptr},
    {"main_process_ip", S, kUse, true, nullptr, nullptr},
    {"main_process_port", I, kUse, true, nullptr, nullptr},
    {"rdzv_backend", S, kUse, true, nullptr, nullptr},
    {"same_network", B, kUse, true, nullptr, nullptr},
    // Only its mpirun_hostfile is used; mpirun_ccl is oneCCL's, reported.
    {"mpirun_config", M, kUse, true, nullptr, nullptr},
    // Sharded training (ZeRO); their keys are in kSectionKeys.
    {"deepspeed_config", M, kUse, true, nullptr, nullptr},
    {"fsdp_config", M, kUse, true, nullptr, nullptr},
    // Accelerate 1.x's ParallelismConfig sizes (hybrid sharding).
    {"parallelism_config", M, kUse, true, nullptr, nullptr},
    // Features we don't have. Accelerate writes most of them in every file,
    // set to "off", so only a value that asks for something gets a note.
    {"tp_config", M, kIgn, true, "tensor parallelism is not supported by accelerate-cpp", nullptr},
    {"megatron_lm_config", M, kIgn, true, "Megatron-LM is not supported by accelerate-cpp",
     nullptr},
    {"ipex_config", M, kIgn, true, "Intel Extension for PyTorch is not supported by accelerate-cpp",
     nullptr},
    {"fp8_config", M, kIgn, true, "FP8 training is not supported by accelerate-cpp", nullptr},
    {"dynamo_config", M, kIgn, true, "torch dynamo (torch.compile) is not used by accelerate-cpp",
     nullptr},
    {"enable_cpu_affinity", B, kIgn, false, "NUMA CPU affinity is not supported by accelerate-cpp",
     "false"},
    {"downcast_bf16", S, kIgn, true, "it applies to TPUs only", "no"},
    {"main_training_function", S, kIgn, true, "it applies to TPU launches only", "main"},
    {"tpu_name", S, kIgn, true, "TPUs are not supported by accelerate-cpp", nullptr},
    {"tpu_zone", S, kIgn, true, "TPUs are not supported by accelerate-cpp", nullptr},
    {"tpu_use_cluster", B, kIgn, false, "TPUs are not supported by accelerate-cpp", "false"},
    {"tpu_use_sudo", B, kIgn, false, "TPUs are not supported by accelerate-cpp", "false"},
    {"tpu_vm", L, kIgn, true, "TPUs are not supported by accelerate-cpp", nullptr},
    {"tpu_env", L, kIgn, true, "TPUs are not supported by accelerate-cpp", nullptr},
    {"command_file", S, kIgn, true, "it applies to TPU pods only", nullptr},
    {"commands", L, kIgn, true, "it applies to TPU pods only", nullptr},
    // Old spellings (Accelerate before 0.9 and before 0.18).
    {"fp16", B, kOld, false, nullptr, nullptr},
    {"dynamo_backend", S, kOld, true, "torch dynamo (torch.compile) is not used by accelerate-cpp",
     "no"},
};

// The keys of deepspeed_config and fsdp_config that Accelerate has written
// (commands/config/cluster.py, every version) or reads from them. Used keys
// become launch options; ignored ones with a reason are listed in one note
// when they ask for something (Accelerate's "off" value passes silently),
// those without one are accepted silently. Values we cannot run (nvme)
// are refused when the launcher checks what the ranks get
// (launcher/sharding_check.cpp), or by the ranks (fsdp_offload_params on
// CUDA).
// The reasons complete "accelerate-cpp ignores <keys> (<reason>)".
constexpr const char* kLauncher =
    "it runs one launcher per machine, as Accelerate's standard launcher does";
constexpr const char* kIgnoredModules = "every parameter is sharded, none is left out";

const std::vector<KeySpec> kSectionKeys = {
// Every row of common/sharding_launch_settings.h: a launch setting.
#define ACCELERATE_SECTION_KEY(section, name, Type, setting, metavar, yaml) \
  {#section "." #name, yaml, kUse, true, nullptr, nullptr},
    ACCELERATE_SHARDING_LAUNCH_SETTINGS(ACCELERATE_SECTION_KEY)
#undef ACCELERATE_SECTION_KEY
    // Read by the launcher itself (the ranks' accumulation steps).
    {"deepspeed_config.gradient_accumulation_steps", I, kUse, true, nullptr, nullptr},
    // Meaningless without nvme, which the device keys refuse.
    {"deepspeed_config.offload_optimizer_nvme_path", S, kIgn, true, nullptr, nullptr},
    {"deepspeed_config.offload_param_nvme_path", S, kIgn, true, nullptr, nullptr},
    {"deepspeed_config.deepspeed_multinode_launcher", S, kIgn, true, kLauncher, "standard"},
    {"deepspeed_config.deepspeed_hostfile", S, kIgn, true, kLauncher, nullptr},
    {"deepspeed_config.deepspeed_exclusion_filter", S, kIgn, true, kLauncher, nullptr},
    {"deepspeed_config.deepspeed_inclusion_filter", S, kIgn, true, kLauncher, nullptr},
    {"deepspeed_config.deepspeed_moe_layer_cls_names", S, kIgn, true, "they matter at stage 3 only",
     nullptr},
    {"fsdp_config.fsdp_activation_checkpointing", B, kIgn, true,
     "it has no activation checkpointing", "false"},
    {"fsdp_config.fsdp_ignored_modules", S, kIgn, true, kIgnoredModules, nullptr},
    // Accelerate before 0.26 wrote fsdp_backward_prefetch under this name.
    {"fsdp_config.fsdp_backward_prefetch_policy", S, kUse, true, nullptr, nullptr},
    // PyTorch FSDP's own detail, which changes nothing here.
    {"fsdp_config.fsdp_use_orig_params", B, kIgn, true, nullptr, nullptr},
    // Sequence parallelism's details (the sequences' lengths are always
    // fixed here; attention always goes through the all-to-all) and context
    // parallelism's (its size is a setting, refused above 1).
    {"parallelism_config.parallelism_config_sp_seq_length_is_variable", B, kIgn, true, nullptr,
     nullptr},
    {"parallelism_config.parallelism_config_sp_attn_implementation", S, kIgn, true, nullptr,
     nullptr},
    {"parallelism_config.parallelism_config_cp_comm_strategy", S, kIgn, true, nullptr, nullptr},
    {"parallelism_config.parallelism_config_cp_backend", S, kIgn, true, nullptr, nullptr},
};

// The name closest to a misspelled one, or "": beyond about a third of the
// name in edits, a suggestion is a guess.
std::string closest_name(const std::string& name, const std::vector<std::string>& names) {
  std::size_t best = std::min<std::size_t>(3, std::max<std::size_t>(1, name.size() / 3)) + 1;
  std::string closest;
  for (const auto& candidate : names) {
    std::size_t distance = edit_distance(name, candidate);
    if (distance < best) best = distance, closest = candidate;
  }
  return closest;
}

}  // namespace

const std::vector<KeySpec>& config_key_table() { return kKeys; }

const KeySpec* find_section_key(const std::string& section, const std::string& name) {
  // Accelerate before 0.12 wrote fsdp_config's keys without the prefix.
  const std::string canonical =
      section == "fsdp_config" && name.rfind("fsdp_", 0) != 0 ? "fsdp_" + name : name;
  for (const auto& spec : kSectionKeys) {
    if (section + "." + canonical == spec.name) return &spec;
  }
  return nullptr;
}

std::string closest_section_key(const std::string& section, const std::string& name) {
  std::vector<std::string> names;
  const std::string prefix = section + ".";
  for (const auto& spec : kSectionKeys) {
    const std::string full = spec.name;
    if (full.rfind(prefix, 0) == 0) names.push_back(full.substr(prefix.size()));
  }
  return closest_name(name, names);
}

const KeySpec* find_config_key(const std::string& name) {
  for (const auto& spec : kKeys) {
    if (name == spec.name) return &spec;
  }
  return nullptr;
}

std::string closest_config_key(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& spec : kKeys) names.push_back(spec.name);
  return closest_name(name, names);
}

const char* to_string(KeyType type) {
  static constexpr accelerate::detail::EnumName<KeyType> kKeyTypeNames[] = {
      {KeyType::kString, "a single value"},
      {KeyType::kInt, "a whole number"},
      {KeyType::kBool, "true or false"},
      {KeyType::kMapping, "a mapping of keys"},
      {KeyType::kList, "a list"}};
  static_assert(accelerate::detail::names_are_distinct(kKeyTypeNames));
  return accelerate::detail::enum_name(kKeyTypeNames, type, "?");
}

}  // namespace accelerate::config
