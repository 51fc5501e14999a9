// The YAML config file that `accelerate config` writes and `accelerate
// launch` reads: where it lives, how it loads and checks, and how `accelerate
// env` describes it. Files written by Hugging Face Accelerate (old and current
// versions) load here and ours load there: same path, same keys. Turning its
// values into launch options is the launcher's part (apply_config_file in the
// launcher's config_application.h); nothing here knows launch options.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "accelerate/common/environment.h"
#include "accelerate/common/errors.h"

namespace accelerate::config {

// A config file that cannot be used: unreadable, not YAML, an unknown key, a
// wrong type, a value we cannot run. The message is one line,
// "<file>:<line>: <problem with key 'x'>". `accelerate launch` (and so
// `accelerate test`) reports it like a bad flag, exit code 2; `accelerate env`
// shows it in its report; `accelerate config update` fails with exit code 1.
class ConfigFileError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// $HF_HOME/accelerate/default_config.yaml, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/huggingface/accelerate/default_config.yaml.
std::string default_config_file(const Environment& env);

// The file a command should read: `explicit_path` when given (it must exist,
// else ConfigFileError), otherwise the default file if it exists, otherwise
// nullopt (no config file: every option keeps its default).
std::optional<std::string> config_file_to_use(const std::optional<std::string>& explicit_path,
                                              const Environment& env);

// One top-level key of the file.
struct ConfigValue {
  std::string key;
  // A scalar as written ("2", "true", "MULTI_GPU"); "" when null. A mapping
  // or sequence as one-line flow YAML ("{zero_stage: 2}", "[]").
  std::string text;
  int line = 0;  // 1-based line of the key
  bool is_null = false;
  bool is_collection = false;  // a mapping or a sequence
  // Asks for nothing: null, false, 'no', an empty section or list, or a
  // section of only such values (Accelerate writes ipex_config: {ipex: false}).
  bool is_off = false;
};

struct ConfigFile {
  std::string path;
  // Keys this tool uses, in file order, after type checks. Old spellings are
  // translated on load (fp16: true -> mixed_precision: fp16).
  std::vector<ConfigValue> settings;
  // Keys Accelerate knows for features we don't have (deepspeed_config,
  // fsdp_config, dynamo_config, tpu_*, ...): accepted, kept for
  // `accelerate config update`, and reported by launcher::apply_config_file
  // when they ask for something (a non-empty section, a true switch).
  std::vector<ConfigValue> ignored;

  // The value of `key` among settings, or nullptr.
  const ConfigValue* find(const std::string& key) const;
  // "<path>:<line>", for messages about one value.
  std::string where(const ConfigValue& value) const;
};

// Reads and checks `path`. Throws ConfigFileError naming file, line and key.
ConfigFile load_config_file(const std::string& path);
// The same from text in memory (`path` only names it in messages).
ConfigFile parse_config_text(const std::string& text, const std::string& path);

// "key: value" lines for every key of the file (settings, then ignored keys
// marked "(ignored)"), for `accelerate env`.
std::vector<std::string> describe_config_file(const ConfigFile& file);

}  // namespace accelerate::config
