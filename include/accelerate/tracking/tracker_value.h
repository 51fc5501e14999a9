// TrackerValue: one value handed to experiment trackers (log(), the run
// configuration) or shown in a progress bar's postfix: a bool, an integer, a
// floating-point number or a string. Any arithmetic type converts implicitly,
// so  {{"loss", 0.25}, {"epoch", 3}, {"optimizer", "adamw"}}  just works.
// LibTorch-free on purpose: trackers never need tensors (call .item<double>()).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <variant>

namespace accelerate {

class TrackerValue {
 public:
  using Storage = std::variant<bool, std::int64_t, double, std::string>;

  TrackerValue() : value_(0.0) {}
  TrackerValue(bool value) : value_(value) {}  // NOLINT: implicit by design
  template <typename T,
            std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  TrackerValue(T value) : value_(static_cast<std::int64_t>(value)) {}  // NOLINT
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  TrackerValue(T value) : value_(static_cast<double>(value)) {}    // NOLINT
  TrackerValue(const char* value) : value_(std::string(value)) {}  // NOLINT
  TrackerValue(std::string value) : value_(std::move(value)) {}    // NOLINT

  bool is_bool() const { return std::holds_alternative<bool>(value_); }
  bool is_int() const { return std::holds_alternative<std::int64_t>(value_); }
  bool is_double() const { return std::holds_alternative<double>(value_); }
  bool is_string() const { return std::holds_alternative<std::string>(value_); }
  // Numbers and bools (true = 1): what TensorBoard plots as a scalar.
  bool is_number() const { return !is_string(); }

  // The value as a double; throws accelerate::Error for a string.
  double to_double() const;
  // The string; throws accelerate::Error for anything else.
  const std::string& string() const;
  const Storage& storage() const { return value_; }

  // Human-readable: "true", "3", "0.25" (shortest form that reads back
  // exactly), or the string itself.
  std::string to_string() const;

  bool operator==(const TrackerValue& other) const { return value_ == other.value_; }

 private:
  Storage value_;
};

// Values of one log() call, by name.
using TrackerValues = std::map<std::string, TrackerValue>;
// The run configuration (hyperparameters) given to init_trackers().
using TrackerConfig = std::map<std::string, TrackerValue>;

}  // namespace accelerate
