#include "trainer/checkpoint_folders.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "accelerate/errors.h"
#include "tracking/text_format.h"

namespace accelerate::trainer {
namespace {

constexpr const char* kPrefix = "checkpoint-";

}  // namespace

std::string checkpoint_name(int64_t step) { return kPrefix + std::to_string(step); }

std::vector<CheckpointFolder> checkpoint_folders(const std::string& output_dir) {
  std::vector<CheckpointFolder> folders;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(output_dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string digits = name.substr(0, std::string(kPrefix).size()) == kPrefix
                                   ? name.substr(std::string(kPrefix).size())
                                   : "";
    if (digits.empty() || digits.size() > 18 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        !entry.is_directory(ec)) {
      continue;
    }
    folders.push_back({std::stoll(digits), entry.path().string()});
  }
  std::sort(folders.begin(), folders.end(),
            [](const auto& a, const auto& b) { return a.step < b.step; });
  return folders;
}

void remove_oldest_checkpoints(const std::string& output_dir, int limit) {
  auto folders = checkpoint_folders(output_dir);
  for (std::size_t i = 0; i + static_cast<std::size_t>(limit) < folders.size(); ++i) {
    std::error_code ec;
    std::filesystem::remove_all(folders[i].path, ec);
    if (ec) throw Error("cannot remove old checkpoint " + folders[i].path + ": " + ec.message());
  }
}

void write_trainer_state(const std::string& folder, const TrainerState& state) {
  std::ostringstream out;
  out << "{\n  \"global_step\": " << state.global_step << ",\n  \"max_steps\": " << state.max_steps
      << ",\n  \"epoch\": " << tracking::json_value(state.epoch) << ",\n  \"log_history\": [";
  for (std::size_t i = 0; i < state.log_history.size(); ++i) {
    out << (i ? ",\n    {" : "\n    {");
    bool first = true;
    for (const auto& [key, value] : state.log_history[i]) {
      out << (first ? "" : ", ") << "\"" << key << "\": " << tracking::json_value(value);
      first = false;
    }
    out << "}";
  }
  out << "\n  ]\n}\n";
  const std::string path = folder + "/trainer_state.json";
  std::ofstream file(path);
  file << out.str();
  if (!file.flush()) throw Error("cannot write " + path);
}

}  // namespace accelerate::trainer
