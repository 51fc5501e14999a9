#include "sharding/deepspeed_file_objects.h"

#include <iostream>
#include <memory>

#include "accelerate/common/errors.h"
#include "accelerate/schedule/deepspeed_schedule.h"
#include "accelerate/sharding/dummy_optim.h"
#include "accelerate/sharding/dummy_scheduler.h"
#include "sharding/deepspeed_objects.h"

namespace accelerate::sharding {

DeepSpeedFileObjects::DeepSpeedFileObjects(std::optional<DeepSpeedConfig> file)
    : file_(std::move(file)) {}

void DeepSpeedFileObjects::check_against(ProgramValues program, bool main_process) {
  if (!file_ || resolved_) return;
  resolved_ = true;
  // accelerate-cpp sizes no bucket from the hidden size (bucket_cap_mb does),
  // and steps the program's own optimizer and scheduler: the file's sections
  // for them are reported, not resolved.
  program.needs_hidden_size_keys = false;
  DeepSpeedConfig checked = *file_;
  checked.optimizer.reset();
  checked.scheduler.reset();
  const ResolvedDeepSpeedConfig resolved_config = resolve(checked, program);
  if (!main_process) return;
  for (const auto& note : resolved_config.notes) std::cerr << "accelerate: note: " << note << "\n";
  // A section a DummyOptim / DummyScheduler was built from is used.
  const auto mention = [&](const char* what, const std::optional<ParamSection>& section,
                           bool built_from_it) {
    if (!section || built_from_it) return;
    std::cerr << "accelerate: note: " << file_->source << ": the " << what << " section ("
              << section->type << ") is not used: accelerate-cpp steps the " << what
              << " the program prepares (Accelerate would ask for DummyOptim/DummyScheduler)\n";
  };
  mention("optimizer", file_->optimizer, optimizer_built_);
  mention("scheduler", file_->scheduler, schedule_built_);
}

namespace {

// Accelerate's refusal of a stand-in without the file section it stands in for.
void require_section(const std::optional<DeepSpeedConfig>& file, bool has_section,
                     const std::string& section, const std::string& stand_in,
                     const std::string& instead) {
  if (file && has_section) return;
  throw ConfigError((file ? file->source + ": the file has no " + section + " section"
                          : std::string("the job has no DeepSpeed config file")) +
                    ", so " + stand_in +
                    " has nothing to stand in for (Accelerate refuses it too): write the "
                    "section, or declare " +
                    instead + " instead");
}

}  // namespace

void DeepSpeedFileObjects::build_optimizer(DummyOptim& optimizer) {
  require_section(file_, file_ && file_->optimizer, "optimizer", "DummyOptim",
                  "accelerate::Optimizer<YourOptimizer>");
  ProgramValues program;
  program.lr = optimizer.lr();
  program.weight_decay = optimizer.weight_decay();
  const ResolvedParamSection section = resolve_optimizer_section(*file_, program);
  optimizer.build(make_optimizer(section, optimizer.params(), file_->source), section.type);
  optimizer_built_ = true;
}

void DeepSpeedFileObjects::build_schedule(DummyScheduler& scheduler, int world_size,
                                          bool split_batches) {
  require_section(file_, file_ && file_->scheduler, "scheduler", "DummyScheduler",
                  "accelerate::Scheduler<YourScheduler>");
  if (!scheduler.optimizer().built()) {
    throw ConfigError(
        "DummyScheduler: prepare its DummyOptim before it or in the same prepare() call");
  }
  ProgramValues program;
  program.world_size = world_size;
  program.split_batches = split_batches;
  program.lr = scheduler.optimizer().lr();
  program.warmup_num_steps = scheduler.warmup_num_steps();
  program.total_num_steps = scheduler.total_num_steps();
  const ResolvedParamSection section = resolve_scheduler_section(*file_, program);
  scheduler.build(std::make_unique<DeepSpeedSchedule>(scheduler.optimizer().base_optimizer(),
                                                      schedule_options(section, file_->source)));
  schedule_built_ = true;
}

}  // namespace accelerate::sharding
