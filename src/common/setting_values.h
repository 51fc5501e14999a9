// Values of settings together with where each was written.
//
// The ranks of a job read their settings from the environment the launcher
// gives them; the launcher judges the same settings before any process
// exists, from its flags and the config file. Both read through
// SettingValues, so a check runs once on either side with the same code, and
// its messages name the place a value came from: a flag, a config file's key
// and line, a variable of the environment.
//
// LibTorch-free: the command line links this.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "accelerate/common/environment.h"

namespace accelerate::settings {

// Where a value was written.
struct Origin {
  enum class Kind { kEnvironment, kFlag, kConfigFile };
  Kind kind = Kind::kEnvironment;
  // kEnvironment: the variable; kFlag: the flag as written ("--zero_stage");
  // kConfigFile: the key ("deepspeed_config.zero_stage").
  std::string name;
  std::string file;  // kConfigFile only
  int line = 0;      // kConfigFile only, 1-based

  static Origin variable(std::string name);
  static Origin flag(std::string spelled);
  static Origin config_key(std::string key, std::string file, int line);

  // What a "<subject> expects ..., got '...'" message names: the
  // variable's name, "--zero_stage", "cfg.yaml:7: key 'deepspeed_config.zero_stage'".
  std::string subject() const;
  // The value and its place, for a message about a value that parsed but
  // cannot run: "<VARIABLE>=fp16 in the environment",
  // "--mixed_precision fp16", "mixed_precision: fp16 (cfg.yaml:3)".
  std::string describe(std::string_view text) const;
};

struct GivenValue {
  std::string text;
  Origin origin;
};

class SettingValues {
 public:
  virtual ~SettingValues() = default;
  // The value given for the setting whose environment variable is
  // `variable`, or nullopt when nothing gives it (an empty text counts as
  // not given, as an empty variable does).
  virtual std::optional<GivenValue> find(std::string_view variable) const = 0;
};

// The values in an environment; each one's origin is its variable.
class EnvironmentValues final : public SettingValues {
 public:
  explicit EnvironmentValues(const Environment& env) : env_(env) {}
  std::optional<GivenValue> find(std::string_view variable) const override;

 private:
  const Environment& env_;
};

// Values given by a program or a command, keyed by variable, in front of an
// environment that gives the rest (the launcher's own: a variable the user
// exported reaches the ranks unless a flag or the config file replaced it).
class LayeredValues final : public SettingValues {
 public:
  explicit LayeredValues(const Environment& below) : below_(below) {}
  void set(std::string variable, GivenValue value) {
    given_[std::move(variable)] = std::move(value);
  }
  std::optional<GivenValue> find(std::string_view variable) const override;
  // Writes every value given here (not the environment below) into `env`.
  void write_to(Environment& env) const;

 private:
  std::map<std::string, GivenValue, std::less<>> given_;
  EnvironmentValues below_;
};

}  // namespace accelerate::settings
