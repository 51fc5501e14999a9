// The JSONL and CSV trackers (formats in docs/tracking.md). Both append to
// their metrics file, so several runs of one project accumulate in it; each
// run begins with its configuration (JSONL) or rewrites config.csv (CSV).
#pragma once

#include <memory>
#include <string>

#include "accelerate/tracking/tracking.h"
#include "tracking/buffered_file.h"

namespace accelerate {
namespace tracking {

// logging_dir/project/metrics.jsonl:
//   {"wall_time":1700000000.123456,"config":{"lr":0.001}}       (init)
//   {"step":3,"wall_time":1700000001.5,"values":{"loss":0.25}}  (log)
class JsonlTracker : public GeneralTracker {
 public:
  std::string name() const override { return "jsonl"; }
  bool requires_logging_directory() const override { return true; }
  void start(const TrackerRun& run) override;
  void store_init_configuration(const TrackerConfig& config) override;
  void log(const TrackerValues& values, std::int64_t step) override;
  void flush() override;
  void finish() override;

 private:
  std::unique_ptr<BufferedFile> file_;
};

// logging_dir/project/metrics.csv: header "wall_time,step,name,value", one
// row per value (long format: names may differ between log() calls).
// logging_dir/project/config.csv: "name,value", rewritten at each init.
class CsvTracker : public GeneralTracker {
 public:
  std::string name() const override { return "csv"; }
  bool requires_logging_directory() const override { return true; }
  void start(const TrackerRun& run) override;
  void store_init_configuration(const TrackerConfig& config) override;
  void log(const TrackerValues& values, std::int64_t step) override;
  void flush() override;
  void finish() override;

 private:
  std::string run_dir_;
  std::unique_ptr<BufferedFile> file_;
};

// Creates run.run_dir (ConfigError naming `tracker` when it is empty).
void make_run_dir(const TrackerRun& run, const std::string& tracker);

}  // namespace tracking
}  // namespace accelerate
