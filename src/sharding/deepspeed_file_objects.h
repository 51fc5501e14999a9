// DeepSpeedFileObjects: what a DeepSpeed config file contributes to a job
// beyond its settings: the optimizer and scheduler its sections describe
// (built in the place of a DummyOptim / DummyScheduler), and the check of
// its "auto" entries against the program once it has prepared an optimizer.
// Internal; ShardedEngine holds one.
#pragma once

#include <optional>

#include "sharding/deepspeed_config.h"

namespace accelerate {
class DummyOptim;
class DummyScheduler;
}  // namespace accelerate

namespace accelerate::sharding {

class DeepSpeedFileObjects {
 public:
  // `file`: the job's DeepSpeed config file; nullopt when it has none.
  explicit DeepSpeedFileObjects(std::optional<DeepSpeedConfig> file);

  // Fills the file's "auto" entries from `program` and refuses what
  // contradicts it (ConfigError, the same on every process); the main
  // process prints the notes. Once; nothing without a file.
  void check_against(ProgramValues program, bool main_process);
  // DummyOptim / DummyScheduler: builds what the file's optimizer /
  // scheduler section describes in their place; ConfigError when the job
  // has no file, or the file no such section.
  void build_optimizer(DummyOptim& optimizer);
  void build_schedule(DummyScheduler& scheduler, int world_size, bool split_batches);

 private:
  std::optional<DeepSpeedConfig> file_;
  bool resolved_ = false;
  bool optimizer_built_ = false;  // from the file's section, so it is used
  bool schedule_built_ = false;
};

}  // namespace accelerate::sharding
