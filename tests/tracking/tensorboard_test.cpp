// TensorBoard event files, checked by an independent reader (tests/support/read_events.py:
// its own schema compiled by protoc, its own CRC32C): frames, CRCs, tags,
// steps and values bit-exact.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include <unistd.h>

#include "accelerate/common/errors.h"
#include "accelerate/tracking/tensorboard.h"
#include "accelerate/tracking/tracking.h"
#include "tracking/tfrecord.h"
#include "tracking_test_util.h"

namespace accelerate {
namespace {

using testing::double_bits;
using testing::event_files;
using testing::float_bits;
using testing::TempDir;

#if ACCELERATE_TEST_HAVE_TENSORBOARD

TEST(TensorBoard, EventFileHoldsExactlyWhatWasLogged) {
  TempDir dir;
  {
    Trackers trackers(TrackingOptions().log_with({"tensorboard"}).logging_dir(dir.path()));
    trackers.init_trackers("tb",
                           {{"lr", 0.001}, {"optimizer", "adamw"}, {"amp", true}, {"epochs", 3}});
    trackers.log({{"loss", 0.1}, {"acc", 0.875}, {"epoch", 2}, {"note", "hello world"}}, 5);
    trackers.log({{"loss", 1e-7}}, 6);
    trackers.end_training();
  }
  const auto files = event_files(dir.path() + "/tb");
  ASSERT_EQ(files.size(), 1u);
  ACCELERATE_READ_EVENTS_OR_SKIP(result, files[0]);
  const std::string expected =
      "frames 5\npartial_tail_bytes 0\ncrc_errors 0\nwall_time_ok 1\n"
      "event 0 file_version brain.Event:2\n"
      "event 0 hparams_start _hparams_/session_start_info 0 1 amp=bool:true epochs=number:" +
      double_bits(3.0) + " lr=number:" + double_bits(0.001) + " optimizer=string:adamw\n" +
      "event 5 scalar acc " + float_bits(0.875f) + "\n" + "event 5 scalar epoch " +
      float_bits(2.0f) + "\n" + "event 5 scalar loss " + float_bits(0.1f) + "\n" +
      "event 5 text note text 2 7 0 [\"hello world\"]\n" + "event 6 scalar loss " +
      float_bits(1e-7f) + "\n" + "event 0 hparams_end _hparams_/session_end_info 0 1\n";
  EXPECT_EQ(result.output, expected);
}

TEST(TensorBoard, ARunEndedByAnExceptionIsRecordedAsFailed) {
  TempDir dir;
  try {
    Trackers trackers(TrackingOptions().log_with({"tensorboard"}).logging_dir(dir.path()));
    trackers.init_trackers("p", {{"lr", 0.5}});
    throw std::runtime_error("training diverged");
  } catch (const std::runtime_error&) {
  }
  const auto files = event_files(dir.path() + "/p");
  ASSERT_EQ(files.size(), 1u);
  ACCELERATE_READ_EVENTS_OR_SKIP(result, files[0]);
  EXPECT_NE(result.output.find("event 0 hparams_end _hparams_/session_end_info 0 2\n"),
            std::string::npos)
      << result.output;
}

TEST(TensorBoard, FileNameFollowsTensorBoardsPattern) {
  TempDir dir;
  Trackers trackers(TrackingOptions().log_with({"tensorboard"}).logging_dir(dir.path()));
  trackers.init_trackers("nested/run");
  auto& tracker = dynamic_cast<TensorBoardTracker&>(trackers.get_tracker("tensorboard"));
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::regex pattern(".*/nested/run/events\\.out\\.tfevents\\.[0-9]{10}\\." +
                           std::string(host) + "\\." + std::to_string(::getpid()));
  EXPECT_TRUE(std::regex_match(tracker.event_file(), pattern)) << tracker.event_file();
}

TEST(TensorBoard, TwoWritersInOneSecondGetTwoFiles) {
  TempDir dir;
  Trackers first(TrackingOptions().log_with({"tensorboard"}).logging_dir(dir.path()));
  Trackers second(TrackingOptions().log_with({"tensorboard"}).logging_dir(dir.path()));
  first.init_trackers("p");
  second.init_trackers("p");
  const std::string a =
      dynamic_cast<TensorBoardTracker&>(first.get_tracker("tensorboard")).event_file();
  const std::string b =
      dynamic_cast<TensorBoardTracker&>(second.get_tracker("tensorboard")).event_file();
  EXPECT_NE(a, b);
  EXPECT_EQ(event_files(dir.path() + "/p").size(), 2u);
}

TEST(TensorBoard, AddTextAndFlushWithoutEndTraining) {
  TempDir dir;
  Trackers trackers(
      TrackingOptions().log_with({"tensorboard"}).logging_dir(dir.path()).flush_secs(600));
  trackers.init_trackers("p");  // no config: no hparams events
  auto& tracker = dynamic_cast<TensorBoardTracker&>(trackers.get_tracker("tensorboard"));
  tracker.add_text("samples", "a *markdown* line", 9);
  trackers.flush();
  ACCELERATE_READ_EVENTS_OR_SKIP(result, tracker.event_file());
  EXPECT_EQ(result.output,
            "frames 2\npartial_tail_bytes 0\ncrc_errors 0\nwall_time_ok 1\n"
            "event 0 file_version brain.Event:2\n"
            "event 9 text samples text 2 7 0 [\"a *markdown* line\"]\n");
}

TEST(TensorBoard, ReaderKeepsCompleteFramesOfATornFile) {
  TempDir dir;
  std::string file;
  {
    Trackers trackers(TrackingOptions().log_with({"tensorboard"}).logging_dir(dir.path()));
    trackers.init_trackers("p");
    for (int step = 0; step < 3; ++step) trackers.log({{"loss", step}}, step);
    file = dynamic_cast<TensorBoardTracker&>(trackers.get_tracker("tensorboard")).event_file();
  }
  // What a crash in the middle of a write would leave: the first 17 bytes
  // of one more frame (a valid header announcing a payload that is missing).
  const std::string frame = tracking::tfrecord_frame(std::string(40, 'x'));
  std::ofstream(file, std::ios::app | std::ios::binary) << frame.substr(0, 17);
  ACCELERATE_READ_EVENTS_OR_SKIP(result, file);
  EXPECT_NE(result.output.find("frames 4\npartial_tail_bytes 17\ncrc_errors 0\n"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("event 2 scalar loss " + float_bits(2.0f)), std::string::npos);
}

TEST(TensorBoard, ReaderRejectsACorruptedPayload) {
  TempDir dir;
  std::string file;
  {
    Trackers trackers(TrackingOptions().log_with({"tensorboard"}).logging_dir(dir.path()));
    trackers.init_trackers("p");
    trackers.log({{"loss", 0.5}}, 0);
    file = dynamic_cast<TensorBoardTracker&>(trackers.get_tracker("tensorboard")).event_file();
  }
  std::string bytes = testing::read_text(file);
  bytes[bytes.size() - 6] ^= 0x01;  // inside the last payload
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  ACCELERATE_READ_EVENTS_OR_SKIP(result, file);
  EXPECT_NE(result.output.find("crc_errors 1\n"), std::string::npos) << result.output;
}

#else

TEST(TensorBoard, UnavailableWithoutProtobufIsAClearConfigError) {
  try {
    Trackers trackers(TrackingOptions().log_with({"tensorboard"}).logging_dir("/tmp"));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("built without libprotobuf"), std::string::npos);
  }
  EXPECT_FALSE(tensorboard_available());
}

#endif

}  // namespace
}  // namespace accelerate
