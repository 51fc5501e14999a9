#include "config/config_yaml.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>
#include <vector>

#include "common/environment_text.h"

namespace accelerate::config {
namespace {

// yaml-cpp tags a quoted scalar "!" and a plain one "?"; we mark the strings
// we create the same way.
bool is_string(const YAML::Node& scalar) { return scalar.Tag() == "!"; }

// Would a YAML 1.1 reader (PyYAML) take this plain text for a bool, a null
// or a number, or fail to read it back? (PyYAML, unlike the YAML 1.1 spec,
// reads y and n as strings, and so writes them plain.)
bool needs_quotes(const std::string& text) {
  if (text.empty()) return true;
  static const std::set<std::string> kWords = {
      "~",    "null", "Null",  "NULL",  "yes",   "Yes", "YES", "no", "No",  "NO",  "true",
      "True", "TRUE", "false", "False", "FALSE", "on",  "On",  "ON", "off", "Off", "OFF"};
  if (kWords.count(text)) return true;
  char* end = nullptr;
  std::strtod(text.c_str(), &end);
  if (end != nullptr && *end == '\0') return true;  // 0, 29500, 1.0, 1e3, .inf ...
  if (std::string("-?:,[]{}#&*!|>'\"%@` ").find(text.front()) != std::string::npos) return true;
  if (text.back() == ' ' || text.back() == ':') return true;
  if (text.find(": ") != std::string::npos || text.find(" #") != std::string::npos) return true;
  for (unsigned char c : text) {
    if (c < 0x20) return true;
  }
  return false;
}

std::string quote(const std::string& text) {
  bool control = std::any_of(text.begin(), text.end(), [](unsigned char c) { return c < 0x20; });
  if (!control) {
    std::string out = "'";
    for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
    return out + "'";
  }
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\')
      out += '\\', out += static_cast<char>(c);
    else if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\x%02x", c);
      out += buffer;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// Keys sorted as PyYAML sorts them. The nodes are never assigned to: a
// yaml-cpp Node assignment rewrites the node it refers to, so sorting Node
// values in place would scramble the tree. Sort positions instead.
std::vector<std::pair<std::string, YAML::Node>> sorted_entries(const YAML::Node& map) {
  std::vector<std::string> keys;
  std::vector<YAML::Node> values;
  for (auto it = map.begin(); it != map.end(); ++it) {
    keys.push_back(it->first.Scalar());
    values.push_back(it->second);
  }
  std::vector<std::size_t> order(keys.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return keys[a] < keys[b]; });
  std::vector<std::pair<std::string, YAML::Node>> entries;
  entries.reserve(order.size());
  for (std::size_t index : order) entries.emplace_back(keys[index], values[index]);
  return entries;
}

std::string key_text(const std::string& key) { return needs_quotes(key) ? quote(key) : key; }

bool is_empty_collection(const YAML::Node& node) {
  return (node.IsMap() || node.IsSequence()) && node.size() == 0;
}

void emit_mapping(const YAML::Node& map, int indent, std::ostringstream& out);

void emit_sequence(const YAML::Node& sequence, int indent, std::ostringstream& out) {
  const std::string pad(indent, ' ');
  for (const auto& item : sequence) {
    if (item.IsMap() && item.size() > 0) {
      std::ostringstream nested;
      emit_mapping(item, indent + 2, nested);
      out << pad << "- " << nested.str().substr(indent + 2);  // first key on the dash's line
    } else {
      out << pad << "- " << flow_text(item) << "\n";
    }
  }
}

void emit_mapping(const YAML::Node& map, int indent, std::ostringstream& out) {
  const std::string pad(indent, ' ');
  for (const auto& [key, value] : sorted_entries(map)) {
    out << pad << key_text(key) << ":";
    if (value.IsMap() && !is_empty_collection(value)) {
      out << "\n";
      emit_mapping(value, indent + 2, out);
    } else if (value.IsSequence() && !is_empty_collection(value)) {
      out << "\n";
      emit_sequence(value, indent, out);
    } else {
      out << " " << flow_text(value) << "\n";
    }
  }
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
      out += buffer;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// A scalar as JSON: strings quoted; plain numbers, booleans and nulls as such.
std::string json_scalar(const YAML::Node& scalar) {
  const std::string& text = scalar.Scalar();
  if (is_string(scalar)) return json_string(text);
  if (text == "true" || text == "True") return "true";
  if (text == "false" || text == "False") return "false";
  if (text == "null" || text == "~") return "null";
  char* end = nullptr;
  std::strtod(text.c_str(), &end);
  const bool number = !text.empty() && end != nullptr && *end == '\0' &&
                      text.find_first_not_of("0123456789+-.eE") == std::string::npos;
  return number ? text : json_string(text);
}

void emit_json(const YAML::Node& node, int indent, std::ostringstream& out) {
  if (!node.IsDefined() || node.IsNull()) {
    out << "null";
  } else if (node.IsScalar()) {
    out << json_scalar(node);
  } else if (node.size() == 0) {
    out << (node.IsMap() ? "{}" : "[]");
  } else {
    const std::string inner(indent + 2, ' ');
    out << (node.IsMap() ? "{\n" : "[\n");
    bool first = true;
    auto item = [&](const std::string& key, const YAML::Node& value) {
      out << (first ? "" : ",\n") << inner << key;
      first = false;
      emit_json(value, indent + 2, out);
    };
    if (node.IsMap()) {
      for (const auto& [key, value] : sorted_entries(node)) item(json_string(key) + ": ", value);
    } else {
      for (const auto& value : node) item("", value);
    }
    out << "\n" << std::string(indent, ' ') << (node.IsMap() ? "}" : "]");
  }
}

}  // namespace

YAML::Node string_node(const std::string& text) {
  YAML::Node node(text);
  node.SetTag("!");
  return node;
}

YAML::Node float_node(double value) {
  std::string text = detail::python_float_text(value);
  // PyYAML's represent_float: an exponent without a '.' gets ".0" (1e-05 -> 1.0e-05).
  if (text.find('.') == std::string::npos && text.find('e') != std::string::npos) {
    text.replace(text.find('e'), 1, ".0e");
  }
  return YAML::Node(text);
}

std::string scalar_text(const YAML::Node& scalar) {
  const std::string& text = scalar.Scalar();
  if (is_string(scalar)) return needs_quotes(text) ? quote(text) : text;
  // A plain scalar from a file reads back as it was written.
  return text.empty() ? "''" : text;
}

std::string flow_text(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "null";
  if (node.IsScalar()) return scalar_text(node);
  std::string out;
  if (node.IsSequence()) {
    for (const auto& item : node) out += (out.empty() ? "" : ", ") + flow_text(item);
    return "[" + out + "]";
  }
  for (const auto& [key, value] : sorted_entries(node)) {
    out += (out.empty() ? "" : ", ") + key_text(key) + ": " + flow_text(value);
  }
  return "{" + out + "}";
}

std::string to_config_yaml(const YAML::Node& root) {
  std::ostringstream out;
  emit_mapping(root, 0, out);
  return out.str();
}

std::string to_config_json(const YAML::Node& root) {
  std::ostringstream out;
  emit_json(root, 0, out);
  return out.str() + "\n";
}

}  // namespace accelerate::config
