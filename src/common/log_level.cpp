#include "accelerate/log_level.h"

#include <algorithm>
#include <cctype>

#include "common/settings.h"

namespace accelerate {

const char* to_string(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
    case LogLevel::kCritical: return "CRITICAL";
  }
  return "?";
}

std::optional<LogLevel> parse_log_level(std::string_view text) {
  std::string upper(text);
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (upper == "DEBUG" || upper == "10") return LogLevel::kDebug;
  if (upper == "INFO" || upper == "20") return LogLevel::kInfo;
  if (upper == "WARNING" || upper == "WARN" || upper == "30") return LogLevel::kWarning;
  if (upper == "ERROR" || upper == "40") return LogLevel::kError;
  if (upper == "CRITICAL" || upper == "FATAL" || upper == "50") return LogLevel::kCritical;
  return std::nullopt;
}

LogLevel parse_log_level(const std::string& text, const std::string& source) {
  return settings::kLogLevel.parse(source, text);
}

}  // namespace accelerate
