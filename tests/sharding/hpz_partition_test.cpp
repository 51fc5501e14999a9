// ZeRO++ hpZ's setting: zero_optimization.zero_hpz_partition_size read from
// a DeepSpeed config file (DeepSpeed's integer >= 0, no "auto"), and the
// group size a job runs with (src/sharding/hpz_partition.h), which the ranks
// and `accelerate launch` both take from hpz_partition_size.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "accelerate/common/errors.h"
#include "sharding/deepspeed_config.h"
#include "sharding/hpz_partition.h"

namespace accelerate::sharding {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

DeepSpeedConfig config_with_hpz(const std::string& value) {
  return parse_deepspeed_config(
      R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": )" + value + "}}",
      "ds.json");
}

std::string hpz_parse_error(const std::string& value) {
  try {
    config_with_hpz(value);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "(no error)";
}

// The size a job of `world` processes, `per_machine` a machine, runs with
// at `stage`, and the notes it gave; or the error.
struct HpzJudged {
  int size = 0;
  std::vector<std::string> notes;
  std::string error;
};
HpzJudged judge_hpz(int hpz, int stage, int world, int per_machine) {
  HpzJudged judged;
  try {
    judged.size = hpz_partition_size(config_with_hpz(std::to_string(hpz)), stage, world,
                                     per_machine, &judged.notes);
  } catch (const ConfigError& error) {
    judged.error = error.what();
  }
  return judged;
}

TEST(HpzPartitionSize, IsReadAsDeepSpeedReadsIt) {
  EXPECT_EQ(config_with_hpz("8").zero_optimization.zero_hpz_partition_size, 8);
  EXPECT_EQ(config_with_hpz("8.0").zero_optimization.zero_hpz_partition_size, 8);
  EXPECT_THAT(config_with_hpz("8").ignored_keys, IsEmpty());
  EXPECT_EQ(parse_deepspeed_config(R"({"zero_optimization": {"stage": 3}})", "ds.json")
                .zero_optimization.zero_hpz_partition_size,
            1);
  EXPECT_EQ(hpz_parse_error("\"auto\""),
            "ds.json: zero_optimization.zero_hpz_partition_size cannot be \"auto\" (Accelerate has "
            "no value to fill it with); write a non-negative integer");
  EXPECT_EQ(hpz_parse_error("-1"),
            "ds.json: zero_optimization.zero_hpz_partition_size expects a non-negative integer, "
            "got '-1'");
  EXPECT_EQ(hpz_parse_error("1.5"),
            "ds.json: zero_optimization.zero_hpz_partition_size expects a non-negative integer, "
            "got '1.5'");
}

TEST(HpzPartitionSize, GroupsOfADivisorOfAMachinesProcesses) {
  EXPECT_EQ(judge_hpz(2, 3, 4, 2).size, 2);  // two machines of two
  EXPECT_EQ(judge_hpz(8, 3, 32, 8).size, 8);
  EXPECT_EQ(judge_hpz(2, 3, 4, 4).size, 2);  // halves of one machine
  EXPECT_THAT(judge_hpz(2, 3, 4, 2).notes, IsEmpty());
  // 0 and 1 are DeepSpeed's "off"; so is the lack of a file.
  EXPECT_EQ(judge_hpz(0, 3, 4, 2).size, 1);
  EXPECT_EQ(judge_hpz(1, 3, 4, 2).size, 1);
  EXPECT_THAT(judge_hpz(1, 3, 4, 2).notes, IsEmpty());
  EXPECT_EQ(hpz_partition_size(std::nullopt, 3, 4, 2, nullptr), 1);
}

TEST(HpzPartitionSize, OffWithANoteWhereItWouldChangeNothing) {
  const HpzJudged stage2 = judge_hpz(2, 2, 4, 2);
  EXPECT_EQ(stage2.size, 1);
  EXPECT_THAT(stage2.notes,
              ElementsAre("ds.json: zero_optimization.zero_hpz_partition_size 2 "
                          "applies to ZeRO stage 3 (ZeRO++ hpZ); ignored at stage 2"));
  const HpzJudged alone = judge_hpz(2, 3, 1, 1);
  EXPECT_EQ(alone.size, 1);
  EXPECT_THAT(alone.notes, ElementsAre("ds.json: zero_optimization.zero_hpz_partition_size 2 needs "
                                       "a job of several processes; this one trains as data "
                                       "parallelism"));
  const HpzJudged whole = judge_hpz(4, 3, 4, 4);
  EXPECT_EQ(whole.size, 1);
  EXPECT_THAT(
      whole.notes,
      ElementsAre("ds.json: zero_optimization.zero_hpz_partition_size 4 is every process of "
                  "the job: its secondary copy would be each process's own shard, so this "
                  "is plain stage 3"));
}

TEST(HpzPartitionSize, ASizeThatDoesNotDivideAMachineIsOneLine) {
  EXPECT_EQ(judge_hpz(4, 3, 4, 2).error,
            "ds.json: zero_optimization.zero_hpz_partition_size 4 does not divide the 2 processes "
            "of each machine (the secondary copy of the parameters is partitioned within a "
            "machine); use a divisor of 2, or 1 for plain stage 3");
  EXPECT_EQ(judge_hpz(3, 3, 8, 4).error,
            "ds.json: zero_optimization.zero_hpz_partition_size 3 does not divide the 4 processes "
            "of each machine (the secondary copy of the parameters is partitioned within a "
            "machine); use a divisor of 4, or 1 for plain stage 3");
  // Below stage 3 DeepSpeed never looks at it: no error either.
  EXPECT_EQ(judge_hpz(3, 2, 8, 4).error, "");
}

}  // namespace
}  // namespace accelerate::sharding
