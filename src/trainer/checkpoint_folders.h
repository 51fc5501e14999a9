// The Trainer's checkpoint folders, named as Hugging Face's Trainer names
// them: {output_dir}/checkpoint-{global step}. Internal.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "accelerate/trainer/trainer_callback.h"

namespace accelerate::trainer {

struct CheckpointFolder {
  int64_t step = 0;
  std::string path;
};

std::string checkpoint_name(int64_t step);
// The checkpoint-N folders in `output_dir`, oldest (smallest N) first; none
// when the folder does not exist. Other entries are ignored.
std::vector<CheckpointFolder> checkpoint_folders(const std::string& output_dir);
// Removes the oldest folders until `limit` remain, never `best` (Hugging
// Face's rotation: with a limit of 1 and an older best, 2 remain).
void remove_oldest_checkpoints(const std::string& output_dir, int limit,
                               const std::optional<std::string>& best = std::nullopt);
// Removes every checkpoint folder but `kept`.
void remove_checkpoints_except(const std::string& output_dir, const std::string& kept);
// trainer_state.json (global_step, max_steps, the resolved logging/eval/save
// steps, epoch, best-model fields, log_history), for people
// and tools; resuming reads the state from the save_state files instead.
void write_trainer_state(const std::string& folder, const TrainerState& state);

}  // namespace accelerate::trainer
