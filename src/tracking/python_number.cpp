#include "accelerate/tracking/python_number.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/environment_text.h"

namespace accelerate {

std::string python_float_repr(double value) { return detail::python_float_text(value); }

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
