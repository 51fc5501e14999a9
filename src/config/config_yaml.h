// Writing config YAML the way Hugging Face Accelerate does (PyYAML's
// safe_dump: keys sorted, block style, two-space indent, lists not indented
// under their key, strings quoted only where YAML would read them as
// something else: 'no', 'NO', '0'), so its tools read our files unchanged.
// Internal to the config area; only this area includes yaml-cpp.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

namespace accelerate::config {

// A scalar node that is a string whatever it looks like ("no" stays the
// string "no"). Nodes read from a quoted scalar already count as strings.
YAML::Node string_node(const std::string& text);

// A float as PyYAML writes a Python float: "1.0", "0.5", "1.0e-05".
YAML::Node float_node(double value);

// One scalar as YAML text: strings quoted where needed, others verbatim.
std::string scalar_text(const YAML::Node& scalar);

// A node on one line: "{a: 1, b: [x]}", "[]", "null", "'no'".
std::string flow_text(const YAML::Node& node);

// A top-level mapping as a whole file (ends with a newline).
std::string to_config_yaml(const YAML::Node& root);

// The same as JSON, as Accelerate writes a config file whose name ends in
// ".json" (json.dumps with indent=2 and sorted keys), which it reads back
// with a JSON parser only.
std::string to_config_json(const YAML::Node& root);

}  // namespace accelerate::config
