// The strict JSON reading under the DeepSpeed config reader: parsing that
// refuses duplicate keys and names the line of a syntax error, an object
// reader that lists the keys nobody used, and typed readers whose errors all
// have one form: "<source>: <dotted.key> expects <what>, got '<value>'".
// Internal to src/sharding/; LibTorch-free.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sharding/deepspeed_config.h"

namespace accelerate::sharding::json_input {

using nlohmann::json;

// Throws ConfigError("<source>: <problem>").
[[noreturn]] void fail(const std::string& source, const std::string& problem);

// The value as the user wrote it, on one line and short.
std::string shown(const json& value);

bool is_auto(const json& value);

// The one error for a value of the wrong kind. "auto" where nothing can fill
// it gets its own words, since it is the common slip.
[[noreturn]] void fail_expects(const std::string& source, const std::string& path,
                               const std::string& expected, const json& value);

// Parses `text`, refusing duplicate keys (nlohmann keeps the last silently,
// so two "stage" entries would mean whatever the last says) and absurd
// nesting; a syntax error names the line and column.
json parse_json(const std::string& text, const std::string& source);

void require_object(const std::string& source, const std::string& path, const json& value);

// The value as an int64 if it is an integer; integral floats count, since
// DeepSpeed takes sizes written as 2e8.
std::optional<int64_t> as_integer(const json& value);

// Reads one JSON object: take() marks a key as used; finish() appends the
// keys nobody took to the ignored list, with their dotted paths.
class ObjectReader {
 public:
  ObjectReader(const json& object, std::string prefix, const std::string& source,
               std::vector<std::string>* ignored)
      : object_(object), prefix_(std::move(prefix)), source_(source), ignored_(ignored) {}

  // The value of `key`, or nullptr.
  const json* take(const std::string& key);
  // Keys accepted without comment (logging, or meaningless here).
  void skip(std::initializer_list<const char*> keys) { used_.insert(keys.begin(), keys.end()); }
  std::string path(const std::string& key) const { return prefix_ + key; }
  const std::string& source() const { return source_; }
  void finish() const;

 private:
  const json& object_;
  std::string prefix_;
  const std::string& source_;
  std::vector<std::string>* ignored_;
  std::set<std::string> used_;
};

// read_into(reader, key, target, ...): when the object has `key`, checks its
// value and stores it in `target`; otherwise `target` keeps its default.
void read_into(ObjectReader& r, const std::string& key, int64_t& target, int64_t minimum);
void read_into(ObjectReader& r, const std::string& key, AutoValue<int64_t>& target,
               int64_t minimum);
void read_into(ObjectReader& r, const std::string& key, double& target);             // >= 0
void read_into(ObjectReader& r, const std::string& key, AutoValue<double>& target);  // >= 0
void read_into(ObjectReader& r, const std::string& key, bool& target);
// null counts as absent, as for DeepSpeed's optional flags (overlap_comm).
void read_into(ObjectReader& r, const std::string& key, std::optional<bool>& target);
void read_into(ObjectReader& r, const std::string& key, AutoValue<bool>& target);

}  // namespace accelerate::sharding::json_input
