// Helpers shared by the tracking tests: temporary directories, file reading,
// and the independent Python reader of event files (read_events.py).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "support/temp_dir.h"

namespace accelerate {
namespace testing {

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> files;
  if (!std::filesystem::exists(dir)) return files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) {
      files.push_back(entry.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

inline std::string python() {
  return ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

struct CommandResult {
  int status = -1;  // exit code
  std::string output;
};

inline CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;)
    result.output.append(buffer, n);
  const int raw = ::pclose(pipe);
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return result;
}

// Runs read_events.py on `file`; status 77 means protoc or python3-protobuf
// is missing (the caller skips).
inline CommandResult read_events(const std::string& file) {
  return run_command(python() + " " TRACKING_TEST_DIR "/../support/read_events.py '" + file + "'");
}

#define ACCELERATE_READ_EVENTS_OR_SKIP(result, file)                                            \
  const ::accelerate::testing::CommandResult result = ::accelerate::testing::read_events(file); \
  if (result.status == 77) GTEST_SKIP() << "protoc or python3-protobuf missing";                \
  ASSERT_EQ(result.status, 0) << result.output

inline std::string float_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  char text[16];
  std::snprintf(text, sizeof(text), "%08x", bits);
  return text;
}

inline std::string double_bits(double value) {
  std::uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  char text[24];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(bits));
  return text;
}

// Replaces every "wall_time":<number> by "wall_time":T (JSONL).
inline std::string mask_wall_times(const std::string& text) {
  return std::regex_replace(text, std::regex("\"wall_time\":[0-9.]+"), "\"wall_time\":T");
}

}  // namespace testing
}  // namespace accelerate
