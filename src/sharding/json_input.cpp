// The strict JSON reading under the DeepSpeed config reader (see json_input.h).
#include "sharding/json_input.h"

#include <cmath>
#include <utility>

#include "accelerate/common/errors.h"
#include "common/strict_json.h"

namespace accelerate::sharding::json_input {
namespace {

std::string integer_words(int64_t minimum) {
  if (minimum == 0) return "a non-negative integer";
  if (minimum == 1) return "a positive integer";
  return "an integer of at least " + std::to_string(minimum);
}

bool is_non_negative_number(const json& value) {
  return value.is_number() && std::isfinite(value.get<double>()) && value.get<double>() >= 0;
}

}  // namespace

[[noreturn]] void fail(const std::string& source, const std::string& problem) {
  throw ConfigError(source + ": " + problem);
}

// A value as the user wrote it: one line (dump() escapes newlines), short.
std::string shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

bool is_auto(const json& value) {
  return value.is_string() && value.get_ref<const std::string&>() == "auto";
}

// The one error for a value of the wrong kind; "auto" where Accelerate would
// have nothing to fill it with gets its own words, since it is the common slip.
[[noreturn]] void fail_expects(const std::string& source, const std::string& path,
                               const std::string& expected, const json& value) {
  if (is_auto(value)) {
    fail(source,
         path + " cannot be \"auto\" (Accelerate has no value to fill it with); write " + expected);
  }
  fail(source, path + " expects " + expected + ", got '" + shown(value) + "'");
}

// Parses the JSON strictly (see strict_json.h); a syntax error names the line
// and column.
json parse_json(const std::string& text, const std::string& source) {
  StrictJsonProblem problem;
  std::optional<json> parsed = parse_strict_json(text, StrictJsonLimits{32}, &problem);
  if (parsed) return std::move(*parsed);
  if (problem.kind != StrictJsonProblem::Kind::kSyntax) fail(source, problem.message);
  const std::string where = problem.location.empty() ? "" : problem.location + ": ";
  fail(source, where + "not valid JSON: " + problem.description);
}

const json* ObjectReader::take(const std::string& key) {
  used_.insert(key);
  const auto it = object_.find(key);
  return it == object_.end() ? nullptr : &*it;
}

void ObjectReader::finish() const {
  for (const auto& item : object_.items()) {
    if (used_.count(item.key()) == 0) ignored_->push_back(prefix_ + item.key());
  }
}

// The value as an int64 if it is an integer; integral floats count, since
// DeepSpeed takes sizes written as 2e8.
std::optional<int64_t> as_integer(const json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) {
    const double d = value.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.2e18) {
      return static_cast<int64_t>(d);
    }
  }
  return std::nullopt;
}

void read_into(ObjectReader& r, const std::string& key, int64_t& target, int64_t minimum) {
  const json* value = r.take(key);
  if (value == nullptr) return;
  const auto number = as_integer(*value);
  if (!number || *number < minimum) {
    fail_expects(r.source(), r.path(key), integer_words(minimum), *value);
  }
  target = *number;
}

void read_into(ObjectReader& r, const std::string& key, AutoValue<int64_t>& target,
               int64_t minimum) {
  const json* value = r.take(key);
  if (value == nullptr) return;
  const auto number = as_integer(*value);
  if (is_auto(*value)) {
    target = AutoValue<int64_t>::automatic();
  } else if (number && *number >= minimum) {
    target = AutoValue<int64_t>::of(*number);
  } else {
    fail_expects(r.source(), r.path(key), integer_words(minimum) + " or \"auto\"", *value);
  }
}

void read_into(ObjectReader& r, const std::string& key, double& target) {
  const json* value = r.take(key);
  if (value == nullptr) return;
  if (!is_non_negative_number(*value)) {
    fail_expects(r.source(), r.path(key), "a non-negative number", *value);
  }
  target = value->get<double>();
}

void read_into(ObjectReader& r, const std::string& key, AutoValue<double>& target) {
  const json* value = r.take(key);
  if (value == nullptr) return;
  if (is_auto(*value)) {
    target = AutoValue<double>::automatic();
  } else if (is_non_negative_number(*value)) {
    target = AutoValue<double>::of(value->get<double>());
  } else {
    fail_expects(r.source(), r.path(key), "a non-negative number or \"auto\"", *value);
  }
}

void read_into(ObjectReader& r, const std::string& key, bool& target) {
  const json* value = r.take(key);
  if (value == nullptr) return;
  if (!value->is_boolean()) fail_expects(r.source(), r.path(key), "true or false", *value);
  target = value->get<bool>();
}

void read_into(ObjectReader& r, const std::string& key, std::optional<bool>& target) {
  const json* value = r.take(key);
  if (value == nullptr || value->is_null()) return;
  if (!value->is_boolean()) fail_expects(r.source(), r.path(key), "true or false", *value);
  target = value->get<bool>();
}

void read_into(ObjectReader& r, const std::string& key, AutoValue<bool>& target) {
  const json* value = r.take(key);
  if (value == nullptr) return;
  if (is_auto(*value)) {
    target = AutoValue<bool>::automatic();
  } else if (value->is_boolean()) {
    target = AutoValue<bool>::of(value->get<bool>());
  } else {
    fail_expects(r.source(), r.path(key), "true, false or \"auto\"", *value);
  }
}

void require_object(const std::string& source, const std::string& path, const json& value) {
  if (!value.is_object()) fail_expects(source, path, "an object", value);
}

}  // namespace accelerate::sharding::json_input
