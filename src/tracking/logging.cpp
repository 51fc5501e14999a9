#include "accelerate/tracking/logging.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>

#include "accelerate/common/errors.h"
#include "accelerate/distributed/communicator.h"
#include "common/settings.h"

namespace accelerate {

Logger::Logger(std::string name, LoggerOptions options)
    : name_(std::move(name)), communicator_(options.communicator()), stream_(options.stream()) {
  const Environment env = options.environment() ? *options.environment() : current_environment();
  level_ = options.level() ? *options.level() : settings::kLogLevel.read_or_default(env);
  if (options.job()) {
    job_ = *options.job();
  } else if (communicator_) {
    job_ = communicator_->job();
  } else {
    job_ = JobState::from_environment(env);
  }
}

std::string Logger::format(LogLevel level, const std::string& message) const {
  char stamp[32] = "";
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  if (localtime_r(&now, &local)) std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &local);
  std::string line = std::string("[") + stamp + "] " + to_string(level) + " " + name_;
  if (job_.world_size > 1) {
    line += " [rank " + std::to_string(job_.rank) + "/" + std::to_string(job_.world_size) + "]";
  }
  return line + ": " + message;
}

void Logger::write(LogLevel level, const std::string& message) const {
  const std::string line = format(level, message) + "\n";
  if (stream_) {
    stream_->write(line.data(), static_cast<std::streamsize>(line.size()));
    stream_->flush();
  } else {
    std::fwrite(line.data(), 1, line.size(), stderr);  // one call: lines stay whole
    std::fflush(stderr);
  }
}

void Logger::log(LogLevel level, const std::string& message, const LogOptions& options) const {
  if (!is_enabled_for(level)) return;
  if (options.in_order() && job_.world_size > 1) {
    if (!communicator_) {
      throw Error("logger \"" + name_ +
                  "\": in_order logging needs LoggerOptions::communicator in a multi-process run");
    }
    for (int rank = 0; rank < job_.world_size; ++rank) {
      if (rank == job_.rank) write(level, message);
      communicator_->barrier();
    }
    return;
  }
  if (options.in_order() || !options.main_process_only() || job_.is_main_process()) {
    write(level, message);
  }
}

Logger get_logger(const std::string& name, LoggerOptions options) {
  return Logger(name, std::move(options));
}

}  // namespace accelerate
