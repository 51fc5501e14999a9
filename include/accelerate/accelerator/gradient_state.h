// GradientState: the facts about the current step that the Accelerator, the
// prepared optimizers and schedulers, and the data loaders share. One per
// Accelerator, held by shared_ptr so a wrapper may outlive the Accelerator
// without dangling.
#pragma once

#include <cstdint>
#include <vector>

namespace accelerate {

class DataLoaderBase;

class GradientState {
 public:
  // Gradients are being synchronised this step (Accelerate's
  // sync_gradients): the optimizer really steps and schedulers advance.
  bool sync_gradients() const { return sync_gradients_; }
  void set_sync_gradients(bool sync) { sync_gradients_ = sync; }

  int num_steps() const { return num_steps_; }  // gradient_accumulation_steps
  void set_num_steps(int steps) { num_steps_ = steps; }

  // Whether schedulers advance only with real optimizer steps
  // (GradientAccumulationPlugin.adjust_scheduler).
  bool adjust_scheduler() const { return adjust_scheduler_; }
  void set_adjust_scheduler(bool adjust) { adjust_scheduler_ = adjust; }

  // The loader being iterated (the innermost, if loops nest), or nullptr.
  // Prepared loaders report the start and end of each pass here.
  const DataLoaderBase* active_dataloader() const {
    return active_dataloaders_.empty() ? nullptr : active_dataloaders_.back();
  }
  void loader_began(const DataLoaderBase* loader) { active_dataloaders_.push_back(loader); }
  void loader_ended(const DataLoaderBase* loader);
  // True while the batch just yielded by the active loader is its last.
  bool end_of_dataloader() const;

  // Set by a prepared optimizer after each call to step(): false when it
  // stepped, true when it skipped (no sync step, or inf/nan gradients).
  bool optimizer_step_was_skipped() const { return optimizer_step_was_skipped_; }
  void set_optimizer_step_was_skipped(bool skipped) { optimizer_step_was_skipped_ = skipped; }
  // Real optimizer steps so far, counted over every prepared optimizer.
  int64_t optimizer_steps() const { return optimizer_steps_; }
  void count_optimizer_step() { ++optimizer_steps_; }
  // load_state restores the count a checkpoint recorded.
  void set_optimizer_steps(int64_t steps) { optimizer_steps_ = steps; }

 private:
  bool sync_gradients_ = true;
  int num_steps_ = 1;
  bool adjust_scheduler_ = true;
  std::vector<const DataLoaderBase*> active_dataloaders_;
  bool optimizer_step_was_skipped_ = false;
  int64_t optimizer_steps_ = 0;
};

}  // namespace accelerate
