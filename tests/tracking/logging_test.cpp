// get_logger: levels from ACCELERATE_LOG_LEVEL, the line format with the
// rank, main-process-only lines, and in-order lines across real ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <sstream>
#include <thread>

#include "accelerate/common/errors.h"
#include "accelerate/tracking/logging.h"
#include "support/thread_ranks.h"
#include "tracking_test_util.h"

namespace accelerate {
namespace {

JobState rank_of(int rank, int world_size) {
  JobState job;
  job.rank = rank;
  job.world_size = world_size;
  job.local_rank = rank;
  job.local_world_size = world_size;
  return job;
}

LoggerOptions quiet_env(std::ostream& out) {
  return LoggerOptions().stream(&out).environment(Environment{});
}

TEST(Logger, LevelComesFromAccelerateLogLevel) {
  std::ostringstream out;
  auto logger =
      get_logger("t", quiet_env(out).environment(Environment{{"ACCELERATE_LOG_LEVEL", "warning"}}));
  EXPECT_EQ(logger.level(), LogLevel::kWarning);
  logger.info("hidden");
  logger.warning("shown");
  logger.error("also shown");
  const auto lines = testing::split_lines(out.str());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("WARNING t: shown"), std::string::npos);
  EXPECT_NE(lines[1].find("ERROR t: also shown"), std::string::npos);
}

TEST(Logger, DefaultLevelIsInfoAndOptionsOverrideTheEnvironment) {
  std::ostringstream out;
  EXPECT_EQ(get_logger("t", quiet_env(out)).level(), LogLevel::kInfo);
  auto logger = get_logger("t", quiet_env(out)
                                    .environment(Environment{{"ACCELERATE_LOG_LEVEL", "ERROR"}})
                                    .level(LogLevel::kDebug));
  EXPECT_EQ(logger.level(), LogLevel::kDebug);
  EXPECT_EQ(parse_log_level("10", "x"), LogLevel::kDebug);
  EXPECT_EQ(parse_log_level("Critical", "x"), LogLevel::kCritical);
}

TEST(Logger, BadLevelIsAConfigErrorNamingTheVariable) {
  std::ostringstream out;
  try {
    get_logger("t", quiet_env(out).environment(Environment{{"ACCELERATE_LOG_LEVEL", "loud"}}));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& error) {
    EXPECT_EQ(std::string(error.what()),
              "ACCELERATE_LOG_LEVEL expects a log level (DEBUG, INFO, WARNING, ERROR or CRITICAL), "
              "got 'loud'");
  }
}

TEST(Logger, LineHasTimeLevelNameAndRankInMultiProcessRuns) {
  std::ostringstream out;
  const std::regex single("\\[\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d\\] INFO train: hello");
  EXPECT_TRUE(std::regex_match(get_logger("train", quiet_env(out)).format(LogLevel::kInfo, "hello"),
                               single));
  const std::string multi =
      get_logger("train", quiet_env(out).job(rank_of(1, 4))).format(LogLevel::kInfo, "hello");
  EXPECT_TRUE(std::regex_match(multi, std::regex("\\[.*\\] INFO train \\[rank 1/4\\]: hello")))
      << multi;
}

TEST(Logger, RankFromTheEnvironmentByDefault) {
  std::ostringstream out;
  auto logger = get_logger("t", quiet_env(out).environment(Environment{{"RANK", "2"},
                                                                       {"WORLD_SIZE", "3"},
                                                                       {"LOCAL_RANK", "0"},
                                                                       {"LOCAL_WORLD_SIZE", "1"},
                                                                       {"MASTER_ADDR", "127.0.0.1"},
                                                                       {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(logger.job().rank, 2);
  logger.info("only on rank 0");
  EXPECT_EQ(out.str(), "");
}

TEST(Logger, MainProcessOnlyByDefault) {
  std::ostringstream main_out, other_out;
  auto main = get_logger("t", quiet_env(main_out).job(rank_of(0, 2)));
  auto other = get_logger("t", quiet_env(other_out).job(rank_of(1, 2)));
  main.info("a");
  other.info("a");
  other.info("b", LogOptions().main_process_only(false));
  EXPECT_EQ(testing::split_lines(main_out.str()).size(), 1u);
  const auto lines = testing::split_lines(other_out.str());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("[rank 1/2]: b"), std::string::npos);
}

TEST(Logger, InOrderWithoutACommunicatorIsAnErrorInMultiProcessRuns) {
  std::ostringstream out;
  auto logger = get_logger("t", quiet_env(out).job(rank_of(0, 2)));
  EXPECT_THROW(logger.info("x", LogOptions().in_order(true)), Error);
  auto single = get_logger("t", quiet_env(out));
  EXPECT_NO_THROW(single.info("x", LogOptions().in_order(true)));
}

TEST(Logger, InOrderLinesComeInRankOrderAcrossRealRanks) {
  std::ostringstream shared;  // written by one rank at a time (barriers)
  testing::run_rank_communicators(3, [&](std::shared_ptr<Communicator> comm) {
    auto logger = get_logger(
        "t", LoggerOptions().communicator(comm).stream(&shared).environment(Environment{}));
    // Higher ranks arrive first: without barriers the lines would come reversed.
    std::this_thread::sleep_for(std::chrono::milliseconds(60 * (2 - comm->rank())));
    for (int round = 0; round < 2; ++round) {
      logger.info("round " + std::to_string(round) + " from rank " + std::to_string(comm->rank()),
                  LogOptions().in_order(true));
    }
  });
  const auto lines = testing::split_lines(shared.str());
  ASSERT_EQ(lines.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    const std::string suffix = "[rank " + std::to_string(i % 3) + "/3]: round " +
                               std::to_string(i / 3) + " from rank " + std::to_string(i % 3);
    EXPECT_NE(lines[i].find(suffix), std::string::npos) << lines[i];
  }
}

}  // namespace
}  // namespace accelerate
