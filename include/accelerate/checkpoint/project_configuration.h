// Accelerate's ProjectConfiguration: where a run keeps its checkpoints and
// logs, and how save_state names and prunes checkpoints.
//
//   accelerate::AcceleratorOptions options;
//   options.project_config(accelerate::ProjectConfiguration()
//                              .project_dir("runs/mnist")
//                              .automatic_checkpoint_naming(true)
//                              .total_limit(3));
//   accelerate::Accelerator accelerator(options);
//   accelerator.save_state();   // runs/mnist/checkpoints/checkpoint_0, _1, ... (newest 3 kept)
//   accelerator.load_state();   // the newest complete one
//
// Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "accelerate/common/arg.h"

namespace accelerate {

struct ProjectConfiguration {
  // Root of the run's files. Default: none (save_state then needs a folder,
  // and automatic_checkpoint_naming is refused).
  ACCELERATE_ARG(std::optional<std::string>, project_dir);
  // Where trackers write. Default: project_dir.
  ACCELERATE_ARG(std::optional<std::string>, logging_dir);
  // save_state() without a folder writes {project_dir}/checkpoints/checkpoint_{iteration}
  // and then increments iteration. Default false, as in Accelerate.
  ACCELERATE_ARG(bool, automatic_checkpoint_naming) = false;
  // With automatic naming: keep at most this many checkpoints, deleting the
  // oldest (numerically: checkpoint_9 is older than checkpoint_10) once the
  // new one is complete. Default: keep all.
  ACCELERATE_ARG(std::optional<int64_t>, total_limit);
  // The number the next automatic checkpoint gets. With automatic naming,
  // load_state of a checkpoint_N sets it to N + 1.
  ACCELERATE_ARG(int64_t, iteration) = 0;

 public:
  // logging_dir, falling back to project_dir.
  std::optional<std::string> effective_logging_dir() const {
    return logging_dir_ ? logging_dir_ : project_dir_;
  }
};

}  // namespace accelerate
