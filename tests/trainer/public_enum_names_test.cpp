// Every value of the public enums whose names live in the LibTorch part of
// the library, read back from its own name (the torch-free ones:
// tests/common/enum_names_test.cpp). A value missing from its enum's name
// table fails here.
#include <gtest/gtest.h>

#include <initializer_list>
#include <set>
#include <string>

#include "accelerate/checkpoint/checkpointing.h"
#include "accelerate/distributed/communicator.h"
#include "accelerate/schedule/deepspeed_schedule.h"
#include "accelerate/schedule/lr_schedule.h"
#include "accelerate/trainer/training_arguments.h"

namespace accelerate {
namespace {

TEST(PublicEnumNames, SchedulerTypeRoundTrips) {
  for (SchedulerType value :
       {SchedulerType::kLinear, SchedulerType::kCosine, SchedulerType::kConstant,
        SchedulerType::kConstantWithWarmup, SchedulerType::kCosineWithRestarts,
        SchedulerType::kPolynomial, SchedulerType::kInverseSqrt, SchedulerType::kReduceLROnPlateau,
        SchedulerType::kWarmupStableDecay}) {
    EXPECT_EQ(parse_scheduler_type(to_string(value)), value) << to_string(value);
  }
}

TEST(PublicEnumNames, DeepSpeedScheduleTypeRoundTrips) {
  for (DeepSpeedScheduleType value :
       {DeepSpeedScheduleType::kWarmupLR, DeepSpeedScheduleType::kWarmupDecayLR,
        DeepSpeedScheduleType::kWarmupCosineLR}) {
    EXPECT_EQ(parse_deepspeed_schedule_type(to_string(value)), value) << to_string(value);
  }
}

TEST(PublicEnumNames, IntervalStrategyRoundTrips) {
  for (IntervalStrategy value :
       {IntervalStrategy::kNo, IntervalStrategy::kSteps, IntervalStrategy::kEpoch}) {
    EXPECT_EQ(parse_interval_strategy(to_string(value)), value) << to_string(value);
  }
}

TEST(PublicEnumNames, SaveStrategyRoundTrips) {
  for (SaveStrategy value :
       {SaveStrategy::kNo, SaveStrategy::kSteps, SaveStrategy::kEpoch, SaveStrategy::kBest}) {
    EXPECT_EQ(parse_save_strategy(to_string(value)), value) << to_string(value);
  }
}

TEST(PublicEnumNames, OptimizerNameAndWsdShapeRoundTrip) {
  for (auto value :
       {accelerate::OptimizerName::kAdamWTorch, accelerate::OptimizerName::kAdamWTorchFused,
        accelerate::OptimizerName::kSgd, accelerate::OptimizerName::kAdafactor}) {
    EXPECT_EQ(accelerate::parse_optimizer_name(to_string(value)), value) << to_string(value);
  }
  for (auto value : {accelerate::WsdShape::kLinear, accelerate::WsdShape::kCosine,
                     accelerate::WsdShape::kOneMinusSqrt}) {
    EXPECT_EQ(accelerate::parse_wsd_shape(to_string(value)), value) << to_string(value);
  }
}

// Written only (no parser): each value has a name of its own, not the
// fallback for a value without one.
template <class E>
void expect_written_names_distinct(std::initializer_list<E> values, const std::string& fallback) {
  std::set<std::string> seen;
  for (E value : values) {
    const std::string name = to_string(value);
    EXPECT_NE(name, fallback);
    EXPECT_TRUE(seen.insert(name).second) << name << " twice";
  }
}

TEST(PublicEnumNames, WrittenOnlyEnumsHaveOneNameEach) {
  expect_written_names_distinct({ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin},
                                "?");
  expect_written_names_distinct(
      {CheckpointStage::kStaged, CheckpointStage::kFilesWritten, CheckpointStage::kMetadataWritten,
       CheckpointStage::kRenamed, CheckpointStage::kPruned},
      "unknown");
  EXPECT_STREQ(to_string(static_cast<CheckpointStage>(99)), "unknown");
}

}  // namespace
}  // namespace accelerate
