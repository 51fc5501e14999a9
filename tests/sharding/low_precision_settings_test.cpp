// How the low-precision collectives' settings reach ShardingSettings: FSDP's
// mixed_precision_policy (reduce_dtype following param_dtype as PyTorch's
// MixedPrecision does), DeepSpeed's communication_data_type from its config
// file (reduce only), "fp32" and unset as the tensors' own dtype, stages
// where a dtype has nothing to round, and a bad value's one-line error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <string>

#include "accelerate/common/errors.h"
#include "accelerate/sharding/fsdp_plugin.h"
#include "sharding/sharding_settings.h"
#include "support/temp_dir.h"

namespace low_precision_settings_test {

using accelerate::AcceleratorOptions;
using accelerate::CollectiveDtype;
using accelerate::DeepSpeedPlugin;
using accelerate::FsdpMixedPrecisionPolicy;
using accelerate::FsdpShardingStrategy;
using accelerate::FullyShardedDataParallelPlugin;
using accelerate::sharding::ShardingSettings;

ShardingSettings resolved(const AcceleratorOptions& options) {
  accelerate::JobState job;
  job.rank = 1;  // no notes printed
  job.world_size = 2;
  job.local_world_size = 2;
  auto settings = accelerate::sharding::resolve_sharding_settings(
      options, accelerate::Environment(), job, accelerate::MixedPrecision::kBF16);
  if (!settings) throw std::runtime_error("no sharding settings");
  return *settings;
}

ShardingSettings with_policy(FsdpMixedPrecisionPolicy policy,
                             FsdpShardingStrategy strategy = FsdpShardingStrategy::kShardGradOp) {
  return resolved(AcceleratorOptions().fsdp_plugin(
      FullyShardedDataParallelPlugin().sharding_strategy(strategy).mixed_precision_policy(policy)));
}

TEST(LowPrecisionSettings, FsdpPolicyUnsetIsTheTensorsOwnDtype) {
  const ShardingSettings settings = with_policy(FsdpMixedPrecisionPolicy());
  EXPECT_EQ(settings.param_dtype, std::nullopt);
  EXPECT_EQ(settings.reduce_dtype, std::nullopt);
  // Not Accelerate's default under bf16 mixed precision (documented).
  EXPECT_EQ(
      resolved(AcceleratorOptions().fsdp_plugin(FullyShardedDataParallelPlugin())).reduce_dtype,
      std::nullopt);
}

TEST(LowPrecisionSettings, FsdpReduceDtypeFollowsParamDtypeUnlessSet) {
  ShardingSettings settings =
      with_policy(FsdpMixedPrecisionPolicy().param_dtype(CollectiveDtype::kBf16));
  EXPECT_EQ(settings.param_dtype, at::kBFloat16);
  EXPECT_EQ(settings.reduce_dtype, at::kBFloat16);
  settings = with_policy(FsdpMixedPrecisionPolicy()
                             .param_dtype(CollectiveDtype::kBf16)
                             .reduce_dtype(CollectiveDtype::kFp32)
                             .buffer_dtype(CollectiveDtype::kBf16));
  EXPECT_EQ(settings.param_dtype, at::kBFloat16);
  EXPECT_EQ(settings.reduce_dtype, std::nullopt);  // fp32: nothing rounded
  settings = with_policy(FsdpMixedPrecisionPolicy().reduce_dtype(CollectiveDtype::kFp16),
                         FsdpShardingStrategy::kFullShard);
  EXPECT_EQ(settings.param_dtype, std::nullopt);
  EXPECT_EQ(settings.reduce_dtype, at::kHalf);
}

TEST(LowPrecisionSettings, StagesWithoutTheCollectiveDropTheDtype) {
  // NO_SHARD: data parallelism all-reduces and gathers nothing.
  const ShardingSettings none =
      with_policy(FsdpMixedPrecisionPolicy().param_dtype(CollectiveDtype::kBf16),
                  FsdpShardingStrategy::kNoShard);
  EXPECT_EQ(none.param_dtype, std::nullopt);
  EXPECT_EQ(none.reduce_dtype, std::nullopt);
}

class LowPrecisionDeepSpeedFile : public ::testing::Test {
 protected:
  std::string write(const std::string& json) {
    const std::string path = dir_.file("ds_config.json");
    std::ofstream(path) << json;
    return path;
  }
  ShardingSettings with_file(const std::string& json) {
    return resolved(
        AcceleratorOptions().deepspeed_plugin(DeepSpeedPlugin().hf_ds_config(write(json))));
  }
  accelerate::testing::TempDir dir_{"accelerate-lowp-ds"};
};

TEST_F(LowPrecisionDeepSpeedFile, CommunicationDataTypeSetsTheReduceDtypeOnly) {
  ShardingSettings settings =
      with_file(R"({"zero_optimization": {"stage": 2}, "communication_data_type": "bf16"})");
  EXPECT_EQ(settings.reduce_dtype, at::kBFloat16);
  EXPECT_EQ(settings.param_dtype, std::nullopt);
  settings = with_file(R"({"zero_optimization": {"stage": 3}, "communication_data_type": "fp16"})");
  EXPECT_EQ(settings.reduce_dtype, at::kHalf);
  settings = with_file(R"({"zero_optimization": {"stage": 3}, "communication_data_type": "fp32"})");
  EXPECT_EQ(settings.reduce_dtype, std::nullopt);
  settings = with_file(R"({"zero_optimization": {"stage": 3}})");
  EXPECT_EQ(settings.reduce_dtype, std::nullopt);
  // Stage 1 all-reduces its gradients: nothing to round (a note says so).
  settings = with_file(R"({"zero_optimization": {"stage": 1}, "communication_data_type": "bf16"})");
  EXPECT_EQ(settings.reduce_dtype, std::nullopt);
}

TEST_F(LowPrecisionDeepSpeedFile, BadCommunicationDataTypeIsAOneLineConfigErrorNamingTheKey) {
  try {
    with_file(R"({"zero_optimization": {"stage": 2}, "communication_data_type": "int8"})");
    FAIL() << "int8 accepted";
  } catch (const accelerate::ConfigError& error) {
    const std::string message = error.what();
    EXPECT_THAT(message, ::testing::HasSubstr("communication_data_type"));
    EXPECT_THAT(message, ::testing::HasSubstr("'\"int8\"'"));
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

}  // namespace low_precision_settings_test
