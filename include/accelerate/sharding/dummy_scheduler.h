// accelerate::DummyScheduler: Accelerate's stand-in for the learning-rate
// schedule a DeepSpeed config file's "scheduler" section describes
// (WarmupLR, WarmupDecayLR or WarmupCosineLR: deepspeed_schedule.h). The
// program gives the step counts that the file's "auto" values take
// (total_num_steps counts the optimizer steps of the whole run on all
// processes; each process takes ceil(total / processes) of them, unless
// batches are split), and prepare() builds the schedule on the optimizer
// its DummyOptim became. See dummy_optim.h for the loop.
//
// As accelerate::Scheduler does, step() advances the schedule once per real
// optimizer step (not on accumulation steps or skipped fp16 steps), and
// save_state / load_state keep its position. Without a DeepSpeed config
// file that has a scheduler section, prepare() refuses it, as Accelerate
// does.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "accelerate/accelerator/scheduler.h"
#include "accelerate/schedule/deepspeed_schedule.h"
#include "accelerate/sharding/dummy_optim.h"

namespace accelerate {

class DummyScheduler : public PreparedSchedulerBase {
 public:
  explicit DummyScheduler(DummyOptim& optimizer,
                          std::optional<int64_t> total_num_steps = std::nullopt,
                          int64_t warmup_num_steps = 0);

  void step();

  DummyOptim& optimizer() const { return optimizer_; }
  const std::optional<int64_t>& total_num_steps() const { return total_num_steps_; }
  int64_t warmup_num_steps() const { return warmup_num_steps_; }
  // The schedule prepare() built; ConfigError before.
  DeepSpeedSchedule& schedule();
  bool built() const { return schedule_ != nullptr; }

  // prepare()'s: the schedule to stand in for.
  void build(std::unique_ptr<DeepSpeedSchedule> schedule);

 protected:
  int64_t base_step_count() const override;
  void set_base_step_count(int64_t count) override;

 private:
  DummyOptim& optimizer_;
  std::optional<int64_t> total_num_steps_;
  int64_t warmup_num_steps_;
  std::unique_ptr<DeepSpeedSchedule> schedule_;
};

}  // namespace accelerate
