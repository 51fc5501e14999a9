#include "accelerate/tracking/python_number.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace accelerate {

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // std::to_chars gives the shortest round-trip digits (as Python's dtoa):
  // "-1.2345e+06", "5e-05".
  char buffer[64];
  const auto written =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string text(buffer, written.ptr);
  const bool negative = text[0] == '-';
  if (negative) text.erase(0, 1);
  const std::size_t e = text.find('e');
  const int exponent = std::atoi(text.c_str() + e + 1);
  std::string digits;
  for (std::size_t i = 0; i < e; ++i)
    if (text[i] != '.') digits += text[i];
  // Python's float_repr_style 'short': the point sits after `point` digits;
  // fixed notation for -4 < point <= 16, with ".0" on integral values.
  const int point = exponent + 1;
  const int count = static_cast<int>(digits.size());
  std::string out;
  if (point > -4 && point <= 16) {
    if (point <= 0) {
      out = "0." + std::string(static_cast<std::size_t>(-point), '0') + digits;
    } else if (point >= count) {
      out = digits + std::string(static_cast<std::size_t>(point - count), '0') + ".0";
    } else {
      out = digits.substr(0, point) + "." + digits.substr(point);
    }
  } else {
    out = digits.substr(0, 1);
    if (count > 1) out += "." + digits.substr(1);
    char power[16];
    std::snprintf(power, sizeof(power), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += power;
  }
  return negative ? "-" + out : out;
}

std::string python_general_format(double value, int precision) {
  // C's %g is Python's 'g' (same switch to exponents, same trimming, two
  // exponent digits), but for NaN, which glibc may print as "-nan".
  if (std::isnan(value)) return "nan";
  char text[64];
  std::snprintf(text, sizeof(text), "%.*g", precision, value);
  return text;
}

double python_round(double value, int digits) {
  if (!std::isfinite(value)) return value;
  // glibc's printf rounds the exact binary value correctly, as Python's
  // round does through its dtoa; reading the text back gives the same
  // nearest double.
  char text[512];
  std::snprintf(text, sizeof(text), "%.*f", digits, value);
  return std::strtod(text, nullptr);
}

}  // namespace accelerate
