// TensorBoardTracker: writes TensorBoard event files that `tensorboard
// --logdir LOGGING_DIR` shows live (docs/tracking.md).
//
// Files: logging_dir/project_name/events.out.tfevents.<unix time>.<host>.<pid>
// (".1", ".2", ... appended if that name exists). Each file is a sequence of
// TFRecord frames (u64 length, masked CRC32C of the length, an Event protobuf,
// masked CRC32C of the payload); the first Event carries file_version
// "brain.Event:2". What is written:
//   numbers (and bools as 0/1) -> scalar summaries (simple_value, float32)
//   strings                    -> text-plugin summaries (DT_STRING tensor)
//   the run configuration      -> hparams-plugin session_start_info at
//                                 init_trackers(), session_end_info at
//                                 finish(): success, or failure when finish()
//                                 runs while an exception unwinds the stack
// Without libprotobuf at build time the class exists but start() throws
// ConfigError (and Trackers refuses "tensorboard" up front).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "accelerate/tracking/tracking.h"

namespace accelerate {

class EventFileWriter;  // src/tracking/event_file_writer.h

class TensorBoardTracker : public GeneralTracker {
 public:
  TensorBoardTracker();
  ~TensorBoardTracker() override;

  std::string name() const override { return "tensorboard"; }
  bool requires_logging_directory() const override { return true; }
  void start(const TrackerRun& run) override;
  void store_init_configuration(const TrackerConfig& config) override;
  void log(const TrackerValues& values, std::int64_t step) override;
  void flush() override;
  void finish() override;

  // TensorBoard-specific: a text entry (rendered as markdown by TensorBoard).
  void add_text(const std::string& tag, const std::string& text, std::int64_t step);
  // The event file being written (empty before start()).
  std::string event_file() const;

 private:
  std::unique_ptr<EventFileWriter> writer_;
  bool wrote_session_start_ = false;
};

}  // namespace accelerate
