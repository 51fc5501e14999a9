// What the models' config.json readers share (read_llama_config,
// read_bert_config): the file (a path or a model folder) parsed strictly,
// typed lookups that fail with one line naming the family, the file and the
// key, and the unmodelled keys kept so that writing the config back loses
// nothing. Internal to accelerate_models.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include <c10/core/ScalarType.h>
#include <nlohmann/json.hpp>

namespace torch::nn {
class Module;
}

namespace accelerate::models {

class ConfigJson {
 public:
  // Reads `path_or_folder` (a folder means its config.json) as a JSON
  // object; `family` names the errors ("Llama config"). ConfigError when
  // the file is unreadable, not JSON or not an object.
  ConfigJson(const std::string& family, const std::string& path_or_folder);

  const std::string& path() const { return path_; }
  const nlohmann::json& root() const { return root_; }

  // ConfigError "FAMILY 'PATH': what".
  [[noreturn]] void fail(const std::string& what) const;

  // The value of `key` in `object` (default: the root), nullptr when absent
  // or null.
  const nlohmann::json* find(const std::string& key) const { return find(root_, key); }
  static const nlohmann::json* find(const nlohmann::json& object, const std::string& key);

  // Typed values, `fallback` when absent or null; a value of another type
  // fails naming `where` + key (where: "rope_scaling." for a nested key).
  int64_t integer(const std::string& key, int64_t fallback) const {
    return integer(root_, key, fallback);
  }
  int64_t integer(const nlohmann::json& object, const std::string& key, int64_t fallback,
                  const std::string& where = "") const;
  double number(const std::string& key, double fallback) const {
    return number(root_, key, fallback);
  }
  double number(const nlohmann::json& object, const std::string& key, double fallback,
                const std::string& where = "") const;
  bool boolean(const std::string& key, bool fallback) const;
  std::string text(const std::string& key, const std::string& fallback) const {
    return text(root_, key, fallback);
  }
  std::string text(const nlohmann::json& object, const std::string& key,
                   const std::string& fallback) const;

  // Fails naming the first of `keys` the root lacks.
  void require(std::initializer_list<const char*> keys) const;

  // The root's keys outside `modelled`, as JSON text, plus torch_dtype and
  // dtype (kept although modelled: the dtype the weights were saved in).
  std::map<std::string, std::string> other_keys(const std::set<std::string>& modelled) const;

 private:
  std::string family_, path_;
  nlohmann::json root_;
};

// The start of every config.json we write: the kept unmodelled keys, the
// weights' dtype under both names transformers reads (when not empty),
// model_type and architectures; the family adds its own keys after.
nlohmann::json config_json_start(const std::map<std::string, std::string>& other_keys,
                                 const std::string& model_type, const std::string& architecture,
                                 const std::string& dtype);

// config.json's name of a weight dtype: "bfloat16", "float16", else "float32".
std::string torch_dtype_name(at::ScalarType dtype);

// The dtype a saved config.json names for `module`'s weights (its first
// parameter's).
std::string saved_dtype_name(const torch::nn::Module& module);

// Writes `text` to DIRECTORY/config.json (creating the folder); Error
// naming `writer` and the file when it cannot.
void write_config_file(const std::string& directory, const std::string& text, const char* writer);

// Throws ConfigError "FAMILY: NAME must be positive, not VALUE" for a
// non-positive value (the configs' validate()).
void require_positive(const char* family, int64_t value, const char* name);

// Runs config.validate(), adding " (in 'PATH')" to its ConfigError.
template <class Config>
void validate_from(const Config& config, const std::string& path);

}  // namespace accelerate::models

#include "accelerate/common/errors.h"

namespace accelerate::models {

template <class Config>
void validate_from(const Config& config, const std::string& path) {
  try {
    config.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(e.what()) + " (in '" + path + "')");
  }
}

}  // namespace accelerate::models
