// The keys of Hugging Face Accelerate's cluster config file (ClusterConfig in
// its commands/config/config_args.py, all versions we know of), with their
// types and what accelerate-cpp does with each. One table drives loading,
// type checks, "ignored" notes and `accelerate config update`.
#pragma once

#include <string>
#include <vector>

namespace accelerate::config {

enum class KeyType {
  kString,   // any scalar, kept as text (gpu_ids may be written 0 or '0,1')
  kInt,      // whole number
  kBool,     // true / false (YAML 1.1 spellings too)
  kMapping,  // a section such as deepspeed_config
  kList,     // a sequence such as tpu_env
};

enum class KeyUse {
  kSetting,  // read and applied to launch options
  kIgnored,  // a feature accelerate-cpp does not have: accepted, reported
  kLegacy,   // an old spelling translated on load (fp16, dynamo_backend)
};

struct KeySpec {
  const char* name;
  KeyType type;
  KeyUse use;
  bool nullable;  // `null` is a valid value (Accelerate writes main_process_ip: null)
  // For ignored keys: why, completing "<key> is ignored: ...".
  const char* reason;
  // For ignored scalar keys: the value that asks for nothing (written by
  // Accelerate when the feature is off), so it loads without a note.
  const char* inert_value;
};

const std::vector<KeySpec>& config_key_table();
// The row for `name`, or nullptr.
const KeySpec* find_config_key(const std::string& name);
// The known key closest to a misspelled one, or "" when none is close.
std::string closest_config_key(const std::string& name);

// A key of deepspeed_config or fsdp_config (`section`), whose row is named
// "section.key" (fsdp_config's old unprefixed names find the prefixed row),
// or nullptr.
const KeySpec* find_section_key(const std::string& section, const std::string& name);
// The key of `section` closest to a misspelled one, or "".
std::string closest_section_key(const std::string& section, const std::string& name);

const char* to_string(KeyType type);

}  // namespace accelerate::config
