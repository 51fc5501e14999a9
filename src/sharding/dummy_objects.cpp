// DummyOptim and DummyScheduler: what they do before and after prepare()
// builds the objects they stand in for (src/accelerator/accelerator_zero.cpp).
#include "accelerate/sharding/dummy_optim.h"
#include "accelerate/sharding/dummy_scheduler.h"

#include <utility>

#include "accelerate/common/errors.h"

namespace accelerate {

DummyOptim::DummyOptim(std::vector<torch::Tensor> params, double lr, double weight_decay)
    : params_(std::move(params)), lr_(lr), weight_decay_(weight_decay) {}

torch::Tensor DummyOptim::step(torch::optim::Optimizer::LossClosure closure) {
  torch::optim::Optimizer& optimizer = base_optimizer();
  return prepared_step([&] { return optimizer.step(std::move(closure)); });
}

void DummyOptim::zero_grad() {
  torch::optim::Optimizer& optimizer = base_optimizer();
  prepared_zero_grad(/*set_to_none=*/false, [&] { optimizer.zero_grad(); });
}

torch::optim::Optimizer& DummyOptim::base_optimizer() {
  if (!optimizer_) {
    throw ConfigError(
        "DummyOptim stands in for the optimizer of a DeepSpeed config file: prepare it with "
        "accelerator.prepare() before its first step");
  }
  return *optimizer_;
}

void DummyOptim::build(std::unique_ptr<torch::optim::Optimizer> optimizer, std::string type) {
  optimizer_ = std::move(optimizer);
  type_ = std::move(type);
}

DummyScheduler::DummyScheduler(DummyOptim& optimizer, std::optional<int64_t> total_num_steps,
                               int64_t warmup_num_steps)
    : optimizer_(optimizer),
      total_num_steps_(total_num_steps),
      warmup_num_steps_(warmup_num_steps) {}

void DummyScheduler::step() {
  DeepSpeedSchedule& built = schedule();
  if (!should_advance()) return;
  built.step();
  count_step();
}

DeepSpeedSchedule& DummyScheduler::schedule() {
  if (!schedule_) {
    throw ConfigError(
        "DummyScheduler stands in for the scheduler of a DeepSpeed config file: prepare it with "
        "accelerator.prepare() before its first step");
  }
  return *schedule_;
}

void DummyScheduler::build(std::unique_ptr<DeepSpeedSchedule> schedule) {
  schedule_ = std::move(schedule);
}

int64_t DummyScheduler::base_step_count() const { return schedule_ ? schedule_->steps() : 0; }

void DummyScheduler::set_base_step_count(int64_t count) {
  if (!schedule_) {
    throw ConfigError("DummyScheduler: load_state needs it prepared first");
  }
  schedule_->set_steps(count);
}

}  // namespace accelerate
