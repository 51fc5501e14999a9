// accelerate::Scheduler<Base>: a LibTorch LR scheduler that advances only
// when its optimizer really stepped.
//
//   - torch::optim::StepLR scheduler(optimizer, 30, 0.1);
//   + accelerate::Scheduler<torch::optim::StepLR> scheduler(optimizer, 30, 0.1);
//
// Convention (differs from Hugging Face Accelerate on purpose): one call of
// step() after a real optimizer step advances the schedule by ONE step, on
// any number of processes. Accelerate advances it num_processes times
// (unless split_batches), its most reported surprise (#1398, #2142, #2318,
// #2773, #2926); here a schedule written for "N optimizer steps" lasts N
// optimizer steps whatever the process count. With gradient accumulation,
// calls on accumulation steps do nothing (adjust_scheduler = true, default);
// adjust_scheduler = false makes every call advance it.
// A scheduler stepped per epoch needs no wrapper at all.
//
// Checkpoints (Accelerator::save_state) save the schedule's position: the
// base scheduler's step count and steps_taken(). The learning rates
// themselves live in the optimizer's state. A scheduler with more state of
// its own overrides save/load (calling these too).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include <torch/optim/schedulers/lr_scheduler.h>
#include <torch/serialize/archive.h>

#include "accelerate/accelerator/gradient_state.h"

namespace accelerate {

class PreparedSchedulerBase {
 public:
  virtual ~PreparedSchedulerBase() = default;
  void attach(std::shared_ptr<GradientState> state) { state_ = std::move(state); }
  bool is_prepared() const { return state_ != nullptr; }
  int64_t steps_taken() const { return steps_taken_; }

  // "step_count" (the base scheduler's) and "steps_taken"; load throws
  // accelerate::Error naming a missing or non-integer entry.
  virtual void save(torch::serialize::OutputArchive& archive) const;
  virtual void load(torch::serialize::InputArchive& archive);

 protected:
  // The base LRScheduler's own step counter.
  virtual int64_t base_step_count() const = 0;
  virtual void set_base_step_count(int64_t count) = 0;
  bool should_advance() const {
    if (!state_ || !state_->adjust_scheduler()) return true;
    return state_->sync_gradients() && !state_->optimizer_step_was_skipped();
  }
  void count_step() { ++steps_taken_; }

 private:
  std::shared_ptr<GradientState> state_;
  int64_t steps_taken_ = 0;
};

template <class Base>
class Scheduler : public Base, public PreparedSchedulerBase {
  static_assert(std::is_base_of<torch::optim::LRScheduler, Base>::value,
                "accelerate::Scheduler<Base> needs a torch::optim LR scheduler");

 public:
  using Base::Base;

  void step() {
    if (!should_advance()) return;
    Base::step();
    count_step();
  }

 protected:
  int64_t base_step_count() const override { return static_cast<int64_t>(this->step_count_); }
  void set_base_step_count(int64_t count) override {
    this->step_count_ = static_cast<decltype(this->step_count_)>(count);
  }
};

}  // namespace accelerate
