#include "trainer/checkpoint_folders.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "accelerate/common/errors.h"
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

namespace {

void remove_folder(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) throw Error("cannot remove old checkpoint " + path + ": " + ec.message());
}

bool same_folder(const CheckpointFolder& folder, const std::optional<std::string>& other) {
  return other && std::filesystem::path(folder.path).filename() ==
                      std::filesystem::path(*other).lexically_normal().filename();
}

}  // namespace

void remove_oldest_checkpoints(const std::string& output_dir, int limit,
                               const std::optional<std::string>& best) {
  auto folders = checkpoint_folders(output_dir);
  std::size_t keep = static_cast<std::size_t>(limit);
  const auto best_at = std::find_if(folders.begin(), folders.end(),
                                    [&](const auto& folder) { return same_folder(folder, best); });
  if (best_at != folders.end() && best_at + 1 != folders.end()) {
    // Hugging Face's rule: the best folder counts as the second newest, so
    // it outlives every older one; with a limit of 1 the newest stays too,
    // to resume from.
    std::rotate(best_at, best_at + 1, folders.end() - 1);
    if (keep == 1) keep = 2;
  }
  for (std::size_t i = 0; i + keep < folders.size(); ++i) remove_folder(folders[i].path);
}

void remove_checkpoints_except(const std::string& output_dir, const std::string& kept) {
  for (const auto& folder : checkpoint_folders(output_dir)) {
    if (!same_folder(folder, kept)) remove_folder(folder.path);
  }
}

void write_trainer_state(const std::string& folder, const TrainerState& state) {
  std::ostringstream out;
  out << "{\n  \"global_step\": " << state.global_step << ",\n  \"max_steps\": " << state.max_steps
      << ",\n  \"logging_steps\": " << state.logging_steps
      << ",\n  \"eval_steps\": " << state.eval_steps << ",\n  \"save_steps\": " << state.save_steps
      << ",\n  \"epoch\": " << tracking::json_value(state.epoch) << ",\n  \"best_metric\": "
      << (state.best_metric ? tracking::json_value(*state.best_metric) : "null")
      << ",\n  \"best_global_step\": "
      << (state.best_global_step ? std::to_string(*state.best_global_step) : "null")
      << ",\n  \"best_model_checkpoint\": "
      << (state.best_model_checkpoint ? tracking::json_string(*state.best_model_checkpoint)
                                      : "null")
      << ",\n  \"log_history\": [";
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
