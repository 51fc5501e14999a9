#include "tracking/file_trackers.h"

#include <filesystem>
#include <system_error>

#include "accelerate/common/errors.h"
#include "tracking/text_format.h"

namespace accelerate {
namespace tracking {

void make_run_dir(const TrackerRun& run, const std::string& tracker) {
  if (run.run_dir.empty()) {
    throw ConfigError("log_with \"" + tracker +
                      "\" needs a logging_dir (set project_dir or logging_dir)");
  }
  std::error_code error;
  std::filesystem::create_directories(run.run_dir, error);
  if (error) throw Error("cannot create the log directory " + run.run_dir + ": " + error.message());
}

namespace {
void require_started(const std::unique_ptr<BufferedFile>& file, const char* what) {
  if (!file) throw Error(std::string(what) + " before start()");
}
}  // namespace

// ---- JSONL -------------------------------------------------------------------

void JsonlTracker::start(const TrackerRun& run) {
  make_run_dir(run, name());
  file_ = std::make_unique<BufferedFile>(run.run_dir + "/metrics.jsonl",
                                         BufferedFile::Mode::kAppend, run.flush_secs);
}

void JsonlTracker::store_init_configuration(const TrackerConfig& config) {
  require_started(file_, "JsonlTracker::store_init_configuration()");
  file_->append("{\"wall_time\":" + fixed_seconds(wall_time_now()) +
                ",\"config\":" + json_object(config) + "}\n");
}

void JsonlTracker::log(const TrackerValues& values, std::int64_t step) {
  require_started(file_, "JsonlTracker::log()");
  file_->append("{\"step\":" + std::to_string(step) + ",\"wall_time\":" +
                fixed_seconds(wall_time_now()) + ",\"values\":" + json_object(values) + "}\n");
}

void JsonlTracker::flush() {
  if (file_) file_->flush();
}

void JsonlTracker::finish() {
  if (file_) file_->close();
}

// ---- CSV ---------------------------------------------------------------------

void CsvTracker::start(const TrackerRun& run) {
  make_run_dir(run, name());
  run_dir_ = run.run_dir;
  file_ = std::make_unique<BufferedFile>(run.run_dir + "/metrics.csv", BufferedFile::Mode::kAppend,
                                         run.flush_secs);
  if (file_->initial_size() == 0) file_->append("wall_time,step,name,value\n");
}

void CsvTracker::store_init_configuration(const TrackerConfig& config) {
  require_started(file_, "CsvTracker::store_init_configuration()");
  BufferedFile out(run_dir_ + "/config.csv", BufferedFile::Mode::kTruncate, 0);
  out.append("name,value\n");
  for (const auto& [key, value] : config) {
    out.append(csv_field(key) + "," + csv_field(value.to_string()) + "\n");
  }
  out.close();
}

void CsvTracker::log(const TrackerValues& values, std::int64_t step) {
  require_started(file_, "CsvTracker::log()");
  const std::string prefix = fixed_seconds(wall_time_now()) + "," + std::to_string(step) + ",";
  std::string rows;
  for (const auto& [key, value] : values) {
    rows += prefix + csv_field(key) + "," + csv_field(value.to_string()) + "\n";
  }
  file_->append(rows);  // one record: a crash never keeps half of a log() call
}

void CsvTracker::flush() {
  if (file_) file_->flush();
}

void CsvTracker::finish() {
  if (file_) file_->close();
}

}  // namespace tracking
}  // namespace accelerate
