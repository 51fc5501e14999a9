// Small text helpers for parsing what users and launchers write: variables,
// flags, config values. Internal; errors are one-line ConfigErrors. The number
// parsers here are the only ones: every whole number and every number of
// seconds the project reads goes through them, so "4x", " 4" and "+4" are
// refused the same way everywhere.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace accelerate {
namespace detail {

[[noreturn]] void fail(const std::string& message);
// Values are echoed into one-line messages; a stray newline or escape code in
// a job script must not break the line.
std::string printable(std::string_view text);
// name='value', printable.
std::string quoted(std::string_view name, std::string_view value);
// "a,b,,c" -> {"a", "b", "", "c"}: empty items stay so callers can reject them.
std::vector<std::string_view> split(std::string_view text, char separator);
bool all_digits(std::string_view text);
// A whole decimal number: an optional '-', then digits and nothing else (no
// spaces, '+', hex or exponent), within long long; nullopt otherwise.
std::optional<long long> parse_integer(std::string_view text);
// parse_integer, then within [min, max]; nullopt otherwise.
std::optional<long long> parse_integer_in(std::string_view text, long long min, long long max);
// Digits only (no sign) within int: nullopt otherwise. For parts of lists.
std::optional<int> parse_digits(std::string_view text);
// Seconds as digits with an optional fraction ("300", "2.5", ".5"), no sign,
// read without the C locale, in whole milliseconds (digits finer than 1 ms
// are dropped); nullopt when malformed or above a billion seconds.
std::optional<long long> parse_seconds_as_milliseconds(std::string_view text);
// A number >= 0 as Python's float() reads one, less signs, inf and nan:
// digits with an optional fraction and exponent ("1", "1.0", ".5", "1e-3"),
// read without the C locale; nullopt otherwise.
std::optional<double> parse_non_negative_number(std::string_view text);
// A number as Python's repr() writes it, as Accelerate passes floats on:
// "1.0", "0.5", "0.0001", "1e-05", "1.5e+16", "nan", "-inf". (Public as
// accelerate::python_float_repr.)
std::string python_float_text(double value);
// The shortest text in printf's %g style that reads back as `value`: "0.5",
// "1", "1e-05" (how config errors quote numbers).
std::string shortest_number_text(double value);

}  // namespace detail
}  // namespace accelerate
