#include "accelerate/tracking/tracker_value.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "accelerate/common/errors.h"
#include "tracking/text_format.h"

namespace accelerate {

double TrackerValue::to_double() const {
  if (const auto* v = std::get_if<bool>(&value_)) return *v ? 1.0 : 0.0;
  if (const auto* v = std::get_if<std::int64_t>(&value_)) return static_cast<double>(*v);
  if (const auto* v = std::get_if<double>(&value_)) return *v;
  throw Error("tracker value \"" + std::get<std::string>(value_) + "\" is a string, not a number");
}

const std::string& TrackerValue::string() const {
  if (const auto* v = std::get_if<std::string>(&value_)) return *v;
  throw Error("tracker value " + to_string() + " is not a string");
}

std::string TrackerValue::to_string() const {
  if (const auto* v = std::get_if<bool>(&value_)) return *v ? "true" : "false";
  if (const auto* v = std::get_if<std::int64_t>(&value_)) return std::to_string(*v);
  if (const auto* v = std::get_if<double>(&value_)) return tracking::shortest_double(*v);
  return std::get<std::string>(value_);
}

namespace tracking {

std::string shortest_double(double value) {
  char text[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(text, sizeof(text), "%.*g", precision, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;  // nan, inf and -inf never compare equal: they end at 17 digits
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char escape[8];
          std::snprintf(escape, sizeof(escape), "\\u%04x", c);
          out += escape;
        } else {
          out += static_cast<char>(c);  // UTF-8 passes through unchanged
        }
    }
  }
  return out + "\"";
}

std::string json_value(const TrackerValue& value) {
  if (value.is_string()) return json_string(value.string());
  if (value.is_double()) {
    double v = value.to_double();
    if (v != v || v == HUGE_VAL || v == -HUGE_VAL) return "null";  // JSON has no NaN/inf
  }
  return value.to_string();
}

std::string json_object(const std::map<std::string, TrackerValue>& values) {
  std::string out = "{";
  for (const auto& [name, value] : values) {
    if (out.size() > 1) out += ",";
    out += json_string(name) + ":" + json_value(value);
  }
  return out + "}";
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

double wall_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string fixed_seconds(double seconds) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.6f", seconds);
  return text;
}

}  // namespace tracking
}  // namespace accelerate
