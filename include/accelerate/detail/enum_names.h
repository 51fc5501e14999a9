// The one way an enum is given names: a table of rows {value, name, aliases},
// from which both its to_string and its parser are written, so that what is
// printed and what is accepted cannot drift apart.
//
//   constexpr detail::EnumName<LogLevel> kLogLevelNames[] = {
//       {LogLevel::kDebug, "DEBUG", {"10"}},
//       {LogLevel::kWarning, "WARNING", {"WARN", "30"}}, ...};
//   static_assert(detail::names_are_distinct(kLogLevelNames));
//
//   const char* to_string(LogLevel level) { return detail::enum_name(kLogLevelNames, level, "?"); }
//   ... detail::parse_enum(kLogLevelNames, text, detail::NameCase::kAnyCase);
//
// Internal (not part of the API): public headers include it only where a
// to_string is inline (fsdp_plugin.h, deepspeed_plugin.h).
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace accelerate::detail {

// One value's spellings. `name` is what to_string writes and is always
// accepted; `aliases` are other spellings parsing accepts too (Python's
// numbers for log levels, PyTorch's for FSDP's enums). Unused slots are null.
constexpr std::size_t kMaxAliases = 2;  // enough for every enum so far

template <class E>
struct EnumName {
  E value;
  const char* name;
  std::array<const char*, kMaxAliases> aliases{};
};

// How parsing compares text with a spelling: exactly, or with ASCII letters'
// case ignored (Accelerate upper- or lower-cases such values before
// comparing; the names are ASCII, so no locale is involved).
enum class NameCase { kExact, kAnyCase };

constexpr char upper_ascii(char c) {
  return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c;
}

constexpr bool same_spelling(std::string_view a, std::string_view b, NameCase match) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (match == NameCase::kExact ? a[i] != b[i] : upper_ascii(a[i]) != upper_ascii(b[i]))
      return false;
  }
  return true;
}

// `value`'s name, or `unknown` for a value the table lacks (a cast integer):
// each to_string keeps the fallback text it has always had.
template <class E, std::size_t N>
constexpr const char* enum_name(const EnumName<E> (&names)[N], E value, const char* unknown) {
  for (const EnumName<E>& row : names) {
    if (row.value == value) return row.name;
  }
  return unknown;
}

// The value whose name or alias `text` is, or nullopt. Callers turn nullopt
// into their own message; this never throws.
template <class E, std::size_t N>
constexpr std::optional<E> parse_enum(const EnumName<E> (&names)[N], std::string_view text,
                                      NameCase match) {
  for (const EnumName<E>& row : names) {
    if (same_spelling(row.name, text, match)) return row.value;
    for (const char* alias : row.aliases) {
      if (alias != nullptr && same_spelling(alias, text, match)) return row.value;
    }
  }
  return std::nullopt;
}

// Whether `values` lists the table's values in the table's order: where a
// public list of every value exists (kAllMixedPrecisions), a static_assert
// keeps it and the table in step.
template <class E, std::size_t N, std::size_t M>
constexpr bool same_values(const EnumName<E> (&names)[N], const std::array<E, M>& values) {
  if (N != M) return false;
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i].value != values[i]) return false;
  }
  return true;
}

// A row's spelling number `k`: 0 its name, then its aliases (maybe null).
template <class E>
constexpr const char* spelling(const EnumName<E>& row, std::size_t k) {
  return k == 0 ? row.name : row.aliases[k - 1];
}

// For a static_assert next to every table: each value has one row, and no
// spelling (name or alias) appears twice, even ignoring case, so that either
// NameCase reads every spelling as one value.
template <class E, std::size_t N>
constexpr bool names_are_distinct(const EnumName<E> (&names)[N]) {
  constexpr std::size_t kSlots = 1 + kMaxAliases;
  for (std::size_t a = 0; a < N * kSlots; ++a) {
    for (std::size_t b = a + 1; b < N * kSlots; ++b) {
      const EnumName<E>& first = names[a / kSlots];
      const EnumName<E>& second = names[b / kSlots];
      if (a % kSlots == 0 && b % kSlots == 0 && first.value == second.value) return false;
      const char* x = spelling(first, a % kSlots);
      const char* y = spelling(second, b % kSlots);
      if (x != nullptr && y != nullptr && same_spelling(x, y, NameCase::kAnyCase)) return false;
    }
  }
  return true;
}

// The names, in table order, joined by ", ": what error messages list as
// the valid values.
template <class E, std::size_t N>
std::string joined_names(const EnumName<E> (&names)[N]) {
  std::string joined;
  for (const EnumName<E>& row : names) {
    if (!joined.empty()) joined += ", ";
    joined += row.name;
  }
  return joined;
}

}  // namespace accelerate::detail
