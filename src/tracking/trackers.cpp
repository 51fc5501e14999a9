#include <cstdio>
#include <set>

#include "accelerate/common/errors.h"
#include "accelerate/tracking/tensorboard.h"
#include "accelerate/tracking/tracking.h"
#include "tracking/file_trackers.h"

namespace accelerate {
namespace {

// What get_tracker() hands out where the tracker does not run: Accelerate's
// "blank" tracker, so rank-independent code can call it everywhere.
class BlankTracker : public GeneralTracker {
 public:
  std::string name() const override { return ""; }
  void log(const TrackerValues&, std::int64_t) override {}
};

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "(none)" : out;
}

std::shared_ptr<GeneralTracker> make_builtin(const std::string& name) {
  if (name == "tensorboard") return std::make_shared<TensorBoardTracker>();
  if (name == "jsonl") return std::make_shared<tracking::JsonlTracker>();
  return std::make_shared<tracking::CsvTracker>();
}

}  // namespace

std::vector<std::string> builtin_tracker_names() { return {"tensorboard", "jsonl", "csv", "all"}; }

Trackers::Trackers(TrackingOptions options)
    : options_(std::move(options)), blank_(std::make_unique<BlankTracker>()) {
  if (!(options_.flush_secs() >= 0)) {  // also rejects NaN
    throw ConfigError("TrackingOptions::flush_secs must be >= 0 seconds, got " +
                      TrackerValue(options_.flush_secs()).to_string());
  }
  std::vector<std::string> valid = builtin_tracker_names();
  std::set<std::string> user_names;
  for (const auto& tracker : options_.trackers()) {
    if (!tracker) throw ConfigError("TrackingOptions::trackers holds a null tracker");
    const std::string name = tracker->name();
    if (name.empty() || name == "all" || name == "tensorboard" || name == "jsonl" ||
        name == "csv" || !user_names.insert(name).second) {
      throw ConfigError("tracker name \"" + name +
                        "\" is empty, reserved or used twice; choose another name()");
    }
    valid.push_back(name);
  }
  std::vector<std::string> builtins;  // in log_with order, without repeats
  auto add_builtin = [&](const std::string& name) {
    for (const auto& seen : builtins) {
      if (seen == name) return;
    }
    builtins.push_back(name);
  };
  for (const auto& name : options_.log_with()) {
    if (name == "all") {
      if (tensorboard_available()) add_builtin("tensorboard");
      add_builtin("jsonl");
      add_builtin("csv");
    } else if (name == "tensorboard" || name == "jsonl" || name == "csv") {
      // Fail on every process, at construction, rather than mid-run.
      if (name == "tensorboard" && !tensorboard_available()) TensorBoardTracker().start({});
      add_builtin(name);
    } else if (!user_names.count(name)) {
      throw ConfigError("unknown log_with \"" + name + "\"; valid: " + join(valid));
    }
  }
  std::vector<std::shared_ptr<GeneralTracker>> all;
  for (const auto& name : builtins) all.push_back(make_builtin(name));
  for (const auto& tracker : options_.trackers()) all.push_back(tracker);
  for (auto& tracker : all) {
    if (tracker->requires_logging_directory() && options_.logging_dir().empty()) {
      throw ConfigError("log_with \"" + tracker->name() +
                        "\" needs a logging_dir (set project_dir or logging_dir)");
    }
    if (options_.is_main_process() || !tracker->main_process_only()) {
      trackers_.push_back(std::move(tracker));
    } else {
      inactive_names_.push_back(tracker->name());
    }
  }
  any_configured_ = !all.empty();
}

Trackers::~Trackers() {
  try {
    end_training();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "accelerate: finishing trackers failed: %s\n", error.what());
  }
}

void Trackers::init_trackers(const std::string& project_name, const TrackerConfig& config) {
  if (initialized_) throw Error("init_trackers() was called twice");
  if (project_name.empty()) throw ConfigError("init_trackers(): project_name is empty");
  TrackerRun run;
  run.project_name = project_name;
  if (!options_.logging_dir().empty()) run.run_dir = options_.logging_dir() + "/" + project_name;
  run.flush_secs = options_.flush_secs();
  for (auto& tracker : trackers_) {
    tracker->start(run);
    if (!config.empty()) tracker->store_init_configuration(config);
  }
  initialized_ = true;
}

void Trackers::log(const TrackerValues& values, std::optional<std::int64_t> step) {
  if (!any_configured_) return;  // log_with is empty: Accelerate ignores log()
  if (finished_) throw Error("log() after end_training()");
  if (!initialized_)
    throw Error("log() before init_trackers(): call init_trackers(project_name) first");
  const std::int64_t at = step.value_or(log_calls_);
  ++log_calls_;
  for (auto& tracker : trackers_) tracker->log(values, at);
}

void Trackers::flush() {
  if (!initialized_ || finished_) return;
  for (auto& tracker : trackers_) tracker->flush();
}

void Trackers::end_training() {
  if (finished_ || !initialized_) {
    finished_ = true;
    return;
  }
  finished_ = true;
  std::string failure;
  for (auto& tracker : trackers_) {
    try {
      tracker->finish();
    } catch (const std::exception& error) {
      if (failure.empty()) failure = tracker->name() + ": " + error.what();
    }
  }
  if (!failure.empty()) throw Error("end_training(): " + failure);
}

GeneralTracker& Trackers::get_tracker(const std::string& name) {
  for (auto& tracker : trackers_) {
    if (tracker->name() == name) return *tracker;
  }
  for (const auto& inactive : inactive_names_) {
    if (inactive == name) return *blank_;
  }
  throw Error("get_tracker(\"" + name +
              "\"): no such tracker; active: " + join(active_tracker_names()));
}

std::vector<std::string> Trackers::active_tracker_names() const {
  std::vector<std::string> names;
  for (const auto& tracker : trackers_) names.push_back(tracker->name());
  return names;
}

}  // namespace accelerate
