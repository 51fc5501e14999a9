#include "accelerate/accelerator/scheduler.h"

#include "checkpoint/checkpoint_archives.h"

namespace accelerate {

void PreparedSchedulerBase::save(torch::serialize::OutputArchive& archive) const {
  checkpoint::write_int(archive, "step_count", base_step_count());
  checkpoint::write_int(archive, "steps_taken", steps_taken_);
}

void PreparedSchedulerBase::load(torch::serialize::InputArchive& archive) {
  set_base_step_count(checkpoint::read_int(archive, "step_count"));
  steps_taken_ = checkpoint::read_int(archive, "steps_taken");
}

}  // namespace accelerate
