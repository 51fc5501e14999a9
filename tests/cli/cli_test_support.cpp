#include "cli/cli_test_support.h"

#include <sys/stat.h>

#include <fstream>
#include <stdexcept>

namespace accelerate::testing {

RunResult run_accelerate(const std::vector<std::string>& args,
                         const ChildProcess::EnvironmentChanges& changes,
                         std::chrono::milliseconds timeout) {
  std::vector<std::string> argv = {ACCELERATE_CLI_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv, changes, timeout);
}

void write_file(const std::string& path, const std::string& bytes, bool executable) {
  {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
    if (!out) throw std::runtime_error("cannot write " + path);
  }
  if (executable) ::chmod(path.c_str(), 0755);
}

void write_safetensors(const std::string& path, const std::string& header_json, size_t data_size) {
  std::string bytes;
  uint64_t length = header_json.size();
  for (int i = 0; i < 8; ++i) bytes += static_cast<char>((length >> (8 * i)) & 0xff);
  bytes += header_json;
  bytes += std::string(data_size, '\0');
  write_file(path, bytes);
}

std::map<std::string, std::vector<std::string>> table_rows(const std::string& out) {
  const std::string bar = "│";
  std::map<std::string, std::vector<std::string>> rows;
  for (const auto& line : split_lines(out)) {
    if (line.rfind(bar, 0) != 0) continue;
    std::vector<std::string> cells;
    size_t at = bar.size();
    while (true) {
      const size_t next = line.find(bar, at);
      if (next == std::string::npos) break;
      std::string cell = line.substr(at, next - at);
      cell.erase(0, cell.find_first_not_of(' '));
      cell.erase(cell.find_last_not_of(' ') + 1);
      cells.push_back(cell);
      at = next + bar.size();
    }
    if (cells.size() == 4 && cells[0] != "dtype") rows[cells[0]] = {cells[1], cells[2], cells[3]};
  }
  return rows;
}

}  // namespace accelerate::testing
