// Trackers: option validation, the JSONL and CSV files, user trackers,
// main-process-only behaviour, call order errors and the flush policy.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <thread>

#include "accelerate/common/errors.h"
#include "accelerate/tracking/tensorboard.h"
#include "accelerate/tracking/tracking.h"
#include "tracking_test_util.h"

namespace accelerate {
namespace {

using testing::mask_wall_times;
using testing::read_text;
using testing::split_lines;
using testing::TempDir;

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "";
}

// A user tracker that records what it was asked to do.
class RecordingTracker : public GeneralTracker {
 public:
  explicit RecordingTracker(std::string name, bool main_only = true)
      : name_(std::move(name)), main_only_(main_only) {}
  std::string name() const override { return name_; }
  bool main_process_only() const override { return main_only_; }
  void start(const TrackerRun& run) override {
    calls.push_back("start " + run.project_name + " " + run.run_dir);
  }
  void store_init_configuration(const TrackerConfig& config) override {
    calls.push_back("config " + std::to_string(config.size()));
  }
  void log(const TrackerValues& values, std::int64_t step) override {
    std::string line = "log " + std::to_string(step);
    for (const auto& [key, value] : values) line += " " + key + "=" + value.to_string();
    calls.push_back(line);
  }
  void flush() override { calls.push_back("flush"); }
  void finish() override { calls.push_back("finish"); }
  std::vector<std::string> calls;

 private:
  std::string name_;
  bool main_only_;
};

TEST(Trackers, UnknownNameListsTheValidOnes) {
  auto mine = std::make_shared<RecordingTracker>("mine");
  const std::string message =
      error_of([&] { Trackers(TrackingOptions().log_with({"wandb"}).trackers({mine})); });
  EXPECT_EQ(message, "unknown log_with \"wandb\"; valid: tensorboard, jsonl, csv, all, mine");
  EXPECT_THROW(Trackers(TrackingOptions().log_with({"wandb"})), ConfigError);
}

TEST(Trackers, NegativeFlushIntervalIsAConfigError) {
  EXPECT_EQ(error_of([] { Trackers(TrackingOptions().flush_secs(-1)); }),
            "TrackingOptions::flush_secs must be >= 0 seconds, got -1");
  EXPECT_THROW(Trackers(TrackingOptions().flush_secs(std::nan(""))), ConfigError);
}

TEST(Trackers, BuiltinTrackersNeedALoggingDir) {
  EXPECT_EQ(error_of([] { Trackers(TrackingOptions().log_with({"jsonl"})); }),
            "log_with \"jsonl\" needs a logging_dir (set project_dir or logging_dir)");
  EXPECT_THROW(Trackers(TrackingOptions().log_with({"csv"}).is_main_process(false)), ConfigError);
}

TEST(Trackers, ReservedOrRepeatedUserTrackerNamesAreRejected) {
  auto a = std::make_shared<RecordingTracker>("same");
  auto b = std::make_shared<RecordingTracker>("same");
  EXPECT_THROW(Trackers(TrackingOptions().trackers({a, b})), ConfigError);
  EXPECT_THROW(Trackers(TrackingOptions().trackers({std::make_shared<RecordingTracker>("csv")})),
               ConfigError);
}

TEST(Trackers, AllMeansEveryBuiltinTrackerOfThisBuild) {
  TempDir dir;
  Trackers trackers(TrackingOptions().log_with({"all", "jsonl"}).logging_dir(dir.path()));
  std::vector<std::string> expected = {"jsonl", "csv"};
  if (tensorboard_available()) expected.insert(expected.begin(), "tensorboard");
  EXPECT_EQ(trackers.active_tracker_names(), expected);
}

TEST(Trackers, JsonlFileHoldsConfigThenOneObjectPerLog) {
  TempDir dir;
  {
    Trackers trackers(TrackingOptions().log_with({"jsonl"}).logging_dir(dir.path()));
    trackers.init_trackers("run", {{"lr", 0.001}, {"model", "mlp"}, {"amp", false}, {"epochs", 3}});
    trackers.log({{"loss", 0.5}, {"note", "x \"quoted\""}}, 3);
    trackers.log({{"loss", 0.25}, {"bad", std::nan("")}}, 4);
    trackers.end_training();
  }
  const std::string path = dir.path() + "/run/metrics.jsonl";
  EXPECT_EQ(
      mask_wall_times(read_text(path)),
      "{\"wall_time\":T,\"config\":{\"amp\":false,\"epochs\":3,\"lr\":0.001,\"model\":\"mlp\"}}\n"
      "{\"step\":3,\"wall_time\":T,\"values\":{\"loss\":0.5,\"note\":\"x \\\"quoted\\\"\"}}\n"
      "{\"step\":4,\"wall_time\":T,\"values\":{\"bad\":null,\"loss\":0.25}}\n");
  // Every line is valid JSON for an independent parser.
  auto parsed = testing::run_command(
      testing::python() + " -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' " +
      path);
  EXPECT_EQ(parsed.status, 0) << parsed.output;
}

TEST(Trackers, CsvFilesAreLongFormatMetricsAndConfig) {
  TempDir dir;
  {
    Trackers trackers(TrackingOptions().log_with({"csv"}).logging_dir(dir.path()));
    trackers.init_trackers("run", {{"lr", 0.001}, {"name", "a,b"}});
    trackers.log({{"loss", 0.5}, {"acc", 1}}, 7);
  }  // the destructor finishes
  std::vector<std::string> rows = split_lines(read_text(dir.path() + "/run/metrics.csv"));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0], "wall_time,step,name,value");
  const std::regex row("[0-9]+\\.[0-9]{6},7,(acc,1|loss,0\\.5)");
  EXPECT_TRUE(std::regex_match(rows[1], row)) << rows[1];
  EXPECT_TRUE(std::regex_match(rows[2], row)) << rows[2];
  EXPECT_NE(rows[1].find("acc"), std::string::npos);  // map order: acc before loss
  EXPECT_EQ(read_text(dir.path() + "/run/config.csv"), "name,value\nlr,0.001\nname,\"a,b\"\n");
}

TEST(Trackers, ASecondRunAppendsWithoutASecondHeader) {
  TempDir dir;
  for (int run = 0; run < 2; ++run) {
    Trackers trackers(TrackingOptions().log_with({"csv", "jsonl"}).logging_dir(dir.path()));
    trackers.init_trackers("p", {{"run", run}});
    trackers.log({{"loss", run}}, 0);
  }
  EXPECT_EQ(split_lines(read_text(dir.path() + "/p/metrics.csv")).size(), 3u);
  const auto lines = split_lines(mask_wall_times(read_text(dir.path() + "/p/metrics.jsonl")));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[2], "{\"wall_time\":T,\"config\":{\"run\":1}}");
}

TEST(Trackers, StepsDefaultToTheNumberOfEarlierLogCalls) {
  auto mine = std::make_shared<RecordingTracker>("mine");
  Trackers trackers(TrackingOptions().trackers({mine}));
  trackers.init_trackers("p");
  trackers.log({{"a", 1}});
  trackers.log({{"a", 2}});
  trackers.log({{"a", 3}}, 10);
  trackers.log({{"a", 4}});
  EXPECT_EQ(mine->calls, (std::vector<std::string>{"start p ", "log 0 a=1", "log 1 a=2",
                                                   "log 10 a=3", "log 3 a=4"}));
}

TEST(Trackers, UserTrackerGetsTheWholeLifecycle) {
  TempDir dir;
  auto mine = std::make_shared<RecordingTracker>("mine");
  {
    Trackers trackers(
        TrackingOptions().log_with({"mine"}).trackers({mine}).logging_dir(dir.path()));
    trackers.init_trackers("proj", {{"lr", 0.1}});
    trackers.log({{"loss", 0.5}}, 1);
    trackers.flush();
    EXPECT_EQ(&trackers.get_tracker("mine"), mine.get());
    trackers.end_training();
    trackers.end_training();  // idempotent
    EXPECT_THROW(trackers.log({{"loss", 1}}, 2), Error);
  }
  EXPECT_EQ(mine->calls, (std::vector<std::string>{"start proj " + dir.path() + "/proj", "config 1",
                                                   "log 1 loss=0.5", "flush", "finish"}));
}

TEST(Trackers, CallOrderMistakesAreErrors) {
  TempDir dir;
  Trackers trackers(TrackingOptions().log_with({"jsonl"}).logging_dir(dir.path()));
  EXPECT_EQ(error_of([&] {
              trackers.log({{"a", 1}});
            }),
            "log() before init_trackers(): call init_trackers(project_name) first");
  EXPECT_THROW(trackers.init_trackers(""), ConfigError);
  trackers.init_trackers("p");
  EXPECT_THROW(trackers.init_trackers("p"), Error);
  EXPECT_EQ(error_of([&] { trackers.get_tracker("csv"); }),
            "get_tracker(\"csv\"): no such tracker; active: jsonl");
  // Without any tracker configured, log() is ignored as in Accelerate.
  Trackers none;
  EXPECT_NO_THROW(none.log({{"a", 1}}));
}

TEST(Trackers, OnlyTheMainProcessWrites) {
  TempDir dir;
  auto everywhere = std::make_shared<RecordingTracker>("everywhere", /*main_only=*/false);
  auto main_only = std::make_shared<RecordingTracker>("main_only");
  Trackers trackers(TrackingOptions()
                        .log_with({"all"})
                        .trackers({everywhere, main_only})
                        .logging_dir(dir.path())
                        .is_main_process(false));
  trackers.init_trackers("p", {{"lr", 0.1}});
  trackers.log({{"loss", 0.5}}, 0);
  trackers.end_training();
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/p"));  // no file, no directory
  EXPECT_TRUE(main_only->calls.empty());
  EXPECT_EQ(everywhere->calls.size(), 4u);  // start, config, log, finish
  EXPECT_EQ(trackers.active_tracker_names(), std::vector<std::string>{"everywhere"});
  // Rank-independent code may still fetch configured trackers.
  EXPECT_EQ(trackers.get_tracker("jsonl").name(), "");
  EXPECT_NO_THROW(trackers.get_tracker("main_only").log({{"x", 1}}, 0));
  EXPECT_THROW(trackers.get_tracker("nope"), Error);
}

TEST(Trackers, NothingReachesTheFileBeforeAFlush) {
  TempDir dir;
  Trackers trackers(TrackingOptions().log_with({"jsonl"}).logging_dir(dir.path()).flush_secs(600));
  trackers.init_trackers("p");
  trackers.log({{"loss", 0.5}}, 0);
  const std::string path = dir.path() + "/p/metrics.jsonl";
  EXPECT_EQ(std::filesystem::file_size(path), 0u);
  trackers.flush();
  EXPECT_EQ(split_lines(read_text(path)).size(), 1u);
}

TEST(Trackers, BackgroundFlushMakesValuesVisibleWithoutFurtherCalls) {
  TempDir dir;
  Trackers trackers(TrackingOptions().log_with({"jsonl"}).logging_dir(dir.path()).flush_secs(0.1));
  trackers.init_trackers("p");
  trackers.log({{"loss", 0.5}}, 0);
  const std::string path = dir.path() + "/p/metrics.jsonl";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::filesystem::file_size(path) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(split_lines(read_text(path)).size(), 1u);
}

TEST(Trackers, FlushSecsZeroWritesEachLogAtOnce) {
  TempDir dir;
  Trackers trackers(TrackingOptions().log_with({"csv"}).logging_dir(dir.path()).flush_secs(0));
  trackers.init_trackers("p");
  trackers.log({{"loss", 0.5}}, 0);
  EXPECT_EQ(split_lines(read_text(dir.path() + "/p/metrics.csv")).size(), 2u);
}

}  // namespace
}  // namespace accelerate
