#include "common/setting_values.h"

#include <utility>

namespace accelerate::settings {

Origin Origin::variable(std::string name) { return {Kind::kEnvironment, std::move(name), "", 0}; }

Origin Origin::flag(std::string spelled) { return {Kind::kFlag, std::move(spelled), "", 0}; }

Origin Origin::config_key(std::string key, std::string file, int line) {
  return {Kind::kConfigFile, std::move(key), std::move(file), line};
}

std::string Origin::subject() const {
  if (kind != Kind::kConfigFile) return name;
  return file + ":" + std::to_string(line) + ": key '" + name + "'";
}

std::string Origin::describe(std::string_view text) const {
  const std::string value(text);
  switch (kind) {
    case Kind::kFlag:
      return name + " " + value;
    case Kind::kConfigFile:
      return name + ": " + value + " (" + file + ":" + std::to_string(line) + ")";
    case Kind::kEnvironment:
      break;
  }
  return name + "=" + value + " in the environment";
}

std::optional<GivenValue> EnvironmentValues::find(std::string_view variable) const {
  const std::string name(variable);
  auto text = lookup(env_, name);
  if (!text) return std::nullopt;
  return GivenValue{std::move(*text), Origin::variable(name)};
}

std::optional<GivenValue> LayeredValues::find(std::string_view variable) const {
  auto it = given_.find(variable);
  if (it != given_.end()) {
    if (it->second.text.empty()) return std::nullopt;
    return it->second;
  }
  return below_.find(variable);
}

void LayeredValues::write_to(Environment& env) const {
  for (const auto& [variable, value] : given_) env[variable] = value.text;
}

}  // namespace accelerate::settings
