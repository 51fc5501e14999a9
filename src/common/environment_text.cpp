#include "common/environment_text.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>

#include "accelerate/errors.h"

namespace accelerate {
namespace detail {

[[noreturn]] void fail(const std::string& message) { throw ConfigError(message); }

std::string printable(std::string_view text) {
  std::string out;
  for (unsigned char c : text) out += std::isprint(c) ? static_cast<char>(c) : '?';
  return out;
}

std::string quoted(std::string_view name, std::string_view value) {
  return std::string(name) + "='" + printable(value) + "'";
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> items;
  for (size_t start = 0;;) {
    const size_t end = text.find(separator, start);
    items.push_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return items;
    start = end + 1;
  }
}

bool all_digits(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

std::optional<long long> parse_integer(std::string_view text) {
  const std::string_view digits = text.substr(!text.empty() && text[0] == '-' ? 1 : 0);
  if (digits.empty() || !all_digits(digits)) return std::nullopt;
  long long value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<long long> parse_integer_in(std::string_view text, long long min, long long max) {
  const auto value = parse_integer(text);
  if (!value || *value < min || *value > max) return std::nullopt;
  return value;
}

std::optional<int> parse_digits(std::string_view text) {
  if (text.empty() || text[0] == '-') return std::nullopt;
  const auto value = parse_integer_in(text, 0, INT_MAX);
  if (!value) return std::nullopt;
  return static_cast<int>(*value);
}

std::optional<long long> parse_seconds_as_milliseconds(std::string_view text) {
  constexpr long long kMaxSeconds = 1000000000;
  const size_t dot = text.find('.');
  const std::string_view whole = text.substr(0, dot);
  const std::string_view fraction = dot == std::string_view::npos ? "" : text.substr(dot + 1);
  if ((whole.empty() && fraction.empty()) || !all_digits(whole) || !all_digits(fraction)) {
    return std::nullopt;  // also "1.2.3": the second '.' is not a digit
  }
  const auto seconds = whole.empty() ? std::optional<long long>(0) : parse_integer_in(whole, 0, kMaxSeconds);
  if (!seconds) return std::nullopt;
  long long millis = *seconds * 1000;
  int digit_scale = 100;  // tenths of a second are 100 ms
  for (size_t i = 0; i < fraction.size() && digit_scale > 0; ++i, digit_scale /= 10) {
    millis += (fraction[i] - '0') * digit_scale;
  }
  return millis;
}

}  // namespace detail
}  // namespace accelerate
