// LogLevel: the levels of Accelerate's logger (Python's logging levels).
// LibTorch-free, so the settings contract can read ACCELERATE_LOG_LEVEL.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace accelerate {

enum class LogLevel { kDebug = 10, kInfo = 20, kWarning = 30, kError = 40, kCritical = 50 };

// "DEBUG", "INFO", "WARNING", "ERROR" or "CRITICAL".
const char* to_string(LogLevel level);

// A level name in any case (WARN and FATAL too) or Python's number (10, 20,
// ...); nullopt otherwise.
std::optional<LogLevel> parse_log_level(std::string_view text);

// The same, throwing ConfigError "<source> expects a log level (...), got
// '<text>'" for anything else.
LogLevel parse_log_level(const std::string& text, const std::string& source);

}  // namespace accelerate
