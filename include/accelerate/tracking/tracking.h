// Experiment tracking: Accelerate's log_with / init_trackers / log /
// end_training / get_tracker as a component the Accelerator forwards to.
//
//   accelerate::Trackers trackers(accelerate::TrackingOptions()
//                                     .log_with({"tensorboard", "jsonl"})
//                                     .logging_dir("runs")
//                                     .is_main_process(job.is_main_process()));
//   trackers.init_trackers("mnist", {{"lr", 1e-3}, {"batch_size", 64}});
//   trackers.log({{"train_loss", 0.31}, {"note", "warmup done"}}, step);
//   trackers.end_training();
//
// Built-in trackers (see docs/tracking.md for the file formats), each writing
// under logging_dir/project_name:
//   "tensorboard"  TensorBoard event files (scalars, text, hparams)
//   "jsonl"        metrics.jsonl, one JSON object per line
//   "csv"          metrics.csv (long format) and config.csv
//   "all"          every built-in tracker available in this build
// Users add their own by subclassing GeneralTracker.
//
// Trackers run on the main process only (unless a user tracker says
// otherwise): elsewhere every call is a no-op and no file is created. Names
// are checked on every process, so a typo fails the whole job at once.
// Call a Trackers from one thread (the training loop); the built-in
// trackers' background flushing is internally synchronised.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "accelerate/common/arg.h"
#include "accelerate/tracking/tracker_value.h"

namespace accelerate {

// What init_trackers() tells each tracker when the run starts.
struct TrackerRun {
  std::string project_name;
  // logging_dir/project_name; empty when no logging_dir was set.
  std::string run_dir;
  // TrackingOptions::flush_secs.
  double flush_secs = 10.0;
};

// Accelerate's GeneralTracker: subclass it to send values anywhere.
class GeneralTracker {
 public:
  virtual ~GeneralTracker() = default;
  // The name log_with and get_tracker() use ("tensorboard", "my_tracker").
  virtual std::string name() const = 0;
  // Whether this tracker runs on the main process only (Accelerate's
  // main_process_only). A tracker that returns false runs on every process.
  virtual bool main_process_only() const { return true; }
  // Whether it needs TrackingOptions::logging_dir (checked at init).
  virtual bool requires_logging_directory() const { return false; }

  // Called once by init_trackers(), before store_init_configuration().
  virtual void start(const TrackerRun& run) { (void)run; }
  // The run configuration (hyperparameters); called once after start().
  virtual void store_init_configuration(const TrackerConfig& config) { (void)config; }
  // One set of values at `step`.
  virtual void log(const TrackerValues& values, std::int64_t step) = 0;
  // Make everything logged so far visible to readers (files, servers).
  virtual void flush() {}
  // End of the run (end_training()): flush and release resources.
  virtual void finish() {}
};

// Names accepted by log_with, in documentation order (without user trackers).
std::vector<std::string> builtin_tracker_names();
// Whether this build can write TensorBoard files (it needs libprotobuf).
bool tensorboard_available();

struct TrackingOptions {
  // Built-in trackers by name ("tensorboard", "jsonl", "csv", "all"), and
  // names of the user trackers below. Unknown names are a ConfigError.
  ACCELERATE_ARG(std::vector<std::string>, log_with);
  // User trackers; they are used whether or not log_with names them.
  ACCELERATE_ARG(std::vector<std::shared_ptr<GeneralTracker>>, trackers);
  // Where file-based trackers write (Accelerate's ProjectConfiguration
  // logging_dir, which defaults to project_dir). Required by the built-in
  // trackers.
  ACCELERATE_ARG(std::string, logging_dir);
  // Only the main process tracks (Accelerator::is_main_process()).
  ACCELERATE_ARG(bool, is_main_process) = true;
  // Built-in trackers keep values in memory and write them to their files at
  // least every flush_secs seconds (from a background thread, so a stalled
  // loop still shows up), on flush(), end_training() and destruction. 0
  // writes every log() call through at once. TensorBoard's own default is
  // 120 s; 10 s keeps a live view current at negligible cost.
  ACCELERATE_ARG(double, flush_secs) = 10.0;
};

class Trackers {
 public:
  // Validates the names and creates the trackers (no files yet). Throws
  // ConfigError listing the valid names for an unknown one, for
  // "tensorboard" in a build without protobuf, and for a built-in tracker
  // without logging_dir -- on every process, so a bad setting stops the
  // whole job at once.
  explicit Trackers(TrackingOptions options = {});
  ~Trackers();
  Trackers(const Trackers&) = delete;
  Trackers& operator=(const Trackers&) = delete;

  // Starts every tracker for `project_name` (files go to
  // logging_dir/project_name) and stores `config` when it is not empty.
  // Throws Error when a file cannot be created or when called twice.
  void init_trackers(const std::string& project_name, const TrackerConfig& config = {});

  // Sends `values` to every tracker. Without a step, the number of earlier
  // log() calls is used (0, 1, 2, ...). Before init_trackers() it throws
  // Error (values would otherwise be silently lost); on a process that does
  // not track it does nothing.
  void log(const TrackerValues& values, std::optional<std::int64_t> step = std::nullopt);

  // Writes everything buffered so far to disk.
  void flush();

  // Finishes every tracker (Accelerate's end_training): TensorBoard records
  // the hparams session as successful, files are flushed and closed. Later
  // log() calls throw; calling it again does nothing. The destructor calls
  // it too (reporting failures on stderr).
  void end_training();

  // The tracker called `name`. Where a configured tracker does not run (not
  // the main process) it returns a tracker whose methods do nothing; a name
  // that was never configured throws Error listing the active ones. Cast to TensorBoardTracker
  // (tensorboard.h) etc. for tracker-specific features.
  GeneralTracker& get_tracker(const std::string& name);

  // The trackers that run on this process.
  std::vector<std::string> active_tracker_names() const;
  bool initialized() const { return initialized_; }
  const TrackingOptions& options() const { return options_; }

 private:
  TrackingOptions options_;
  std::vector<std::shared_ptr<GeneralTracker>> trackers_;  // active here
  std::vector<std::string> inactive_names_;                // configured, not run here
  std::unique_ptr<GeneralTracker> blank_;
  bool any_configured_ = false;
  bool initialized_ = false;
  bool finished_ = false;
  std::int64_t log_calls_ = 0;
};

}  // namespace accelerate
