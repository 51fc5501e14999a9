// On ranks that are threads over real Gloo, only the main process writes
// tracking files; every rank can call the same tracking code.
#include <gtest/gtest.h>

#include <filesystem>

#include "accelerate/tracking/tracking.h"
#include "support/thread_ranks.h"
#include "tracking_test_util.h"

namespace accelerate {
namespace {

TEST(DistributedTracking, OnlyTheMainProcessWritesFiles) {
  testing::TempDir shared;
  testing::run_ranks(2, [&](Communicator& comm) {
    // Each rank writes into its own logging_dir, so a stray writer shows up.
    const std::string dir = shared.path() + "/rank" + std::to_string(comm.rank());
    Trackers trackers(TrackingOptions().log_with({"all"}).logging_dir(dir).is_main_process(
        comm.job().is_main_process()));
    trackers.init_trackers("run", {{"world_size", comm.world_size()}});
    for (int step = 0; step < 3; ++step) trackers.log({{"loss", 1.0 / (step + 1)}}, step);
    trackers.get_tracker("jsonl").flush();  // the blank tracker elsewhere
    trackers.end_training();
    comm.barrier();
  });
  EXPECT_FALSE(std::filesystem::exists(shared.path() + "/rank1"));
  const std::string run = shared.path() + "/rank0/run";
  EXPECT_EQ(testing::split_lines(testing::read_text(run + "/metrics.jsonl")).size(), 4u);
  EXPECT_EQ(testing::split_lines(testing::read_text(run + "/metrics.csv")).size(), 4u);
  if (tensorboard_available()) {
    EXPECT_EQ(testing::event_files(run).size(), 1u);
  }
}

}  // namespace
}  // namespace accelerate
