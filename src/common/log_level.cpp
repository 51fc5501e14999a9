#include "accelerate/common/log_level.h"

#include "accelerate/detail/enum_names.h"
#include "common/settings.h"

namespace accelerate {
namespace {

// Any case; the aliases are Python's other name and its numbers.
constexpr detail::EnumName<LogLevel> kLogLevelNames[] = {
    {LogLevel::kDebug, "DEBUG", {"10"}},
    {LogLevel::kInfo, "INFO", {"20"}},
    {LogLevel::kWarning, "WARNING", {"WARN", "30"}},
    {LogLevel::kError, "ERROR", {"40"}},
    {LogLevel::kCritical, "CRITICAL", {"FATAL", "50"}}};
static_assert(detail::names_are_distinct(kLogLevelNames));

}  // namespace

const char* to_string(LogLevel level) { return detail::enum_name(kLogLevelNames, level, "?"); }

std::optional<LogLevel> parse_log_level(std::string_view text) {
  return detail::parse_enum(kLogLevelNames, text, detail::NameCase::kAnyCase);
}

LogLevel parse_log_level(const std::string& text, const std::string& source) {
  return settings::kLogLevel.parse(source, text);
}

}  // namespace accelerate
