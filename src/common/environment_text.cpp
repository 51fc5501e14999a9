#include "common/environment_text.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <sstream>
#include <string>

#include "accelerate/common/errors.h"

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
    items.push_back(
        text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return items;
    start = end + 1;
  }
}

bool all_digits(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](unsigned char c) { return std::isdigit(c) != 0; });
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
  const auto seconds =
      whole.empty() ? std::optional<long long>(0) : parse_integer_in(whole, 0, kMaxSeconds);
  if (!seconds) return std::nullopt;
  long long millis = *seconds * 1000;
  int digit_scale = 100;  // tenths of a second are 100 ms
  for (size_t i = 0; i < fraction.size() && digit_scale > 0; ++i, digit_scale /= 10) {
    millis += (fraction[i] - '0') * digit_scale;
  }
  return millis;
}

std::optional<double> parse_non_negative_number(std::string_view text) {
  // from_chars would also take a '-', "inf", "nan" and hex after "0x"; the
  // first character must start a plain decimal.
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.'))
    return std::nullopt;
  double value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(value))
    return std::nullopt;
  return value;
}

std::string shortest_number_text(double value) {
  std::ostringstream out;
  for (int digits = 1; digits <= 17; ++digits) {
    out.str("");
    out.precision(digits);
    out << value;
    if (std::stod(out.str()) == value) break;
  }
  return out.str();
}

std::string python_float_text(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  std::string text(buffer, result.ptr);  // the shortest digits that read back: "-1.25e+05"
  const std::string sign = text[0] == '-' ? "-" : "";
  const std::size_t e = text.find('e');
  std::string digits = text.substr(sign.size(), e - sign.size());
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(text.substr(e + 1));
  const int size = static_cast<int>(digits.size());
  // Python switches to an exponent below 1e-4 and from 1e16 on.
  if (exponent < -4 || exponent >= 16) {
    const std::string power = std::to_string(std::abs(exponent));
    return sign + digits.substr(0, 1) + (size > 1 ? "." + digits.substr(1) : "") + "e" +
           (exponent < 0 ? "-" : "+") + (power.size() < 2 ? "0" : "") + power;
  }
  if (exponent < 0) return sign + "0." + std::string(-exponent - 1, '0') + digits;
  if (size <= exponent + 1) return sign + digits + std::string(exponent + 1 - size, '0') + ".0";
  return sign + digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
}

}  // namespace detail
}  // namespace accelerate
