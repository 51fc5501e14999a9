// ZeRO++ qwZ / qgZ settings: DeepSpeed's zero_optimization.
// zero_quantized_weights and zero_quantized_gradients read as booleans (no
// longer listed as ignored), a one-line error for anything else, reaching
// ShardingSettings at stage 3 only (DeepSpeed's stage-3 engine is the one
// that reads them), and qgZ taking the place of communication_data_type.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <string>

#include "accelerate/common/errors.h"
#include "sharding/deepspeed_config.h"
#include "sharding/sharding_settings.h"
#include "support/temp_dir.h"

namespace zeropp_settings_test {

using accelerate::AcceleratorOptions;
using accelerate::DeepSpeedPlugin;
using accelerate::sharding::parse_deepspeed_config;
using accelerate::sharding::ShardingSettings;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string zero_section(int stage, const std::string& extra) {
  return R"({"zero_optimization": {"stage": )" + std::to_string(stage) + extra + "}";
}

TEST(ZeroppSettings, ReadAsBooleansAndNoLongerIgnored) {
  const auto config = parse_deepspeed_config(
      zero_section(3, R"(, "zero_quantized_weights": true, "zero_quantized_gradients": true})"),
      "ds.json");
  EXPECT_TRUE(config.zero_optimization.zero_quantized_weights);
  EXPECT_TRUE(config.zero_optimization.zero_quantized_gradients);
  EXPECT_THAT(config.ignored_keys, IsEmpty());
  // DeepSpeed's defaults: off.
  const auto plain = parse_deepspeed_config(zero_section(3, "}"), "ds.json");
  EXPECT_FALSE(plain.zero_optimization.zero_quantized_weights);
  EXPECT_FALSE(plain.zero_optimization.zero_quantized_gradients);
}

TEST(ZeroppSettings, ANonBooleanIsAOneLineError) {
  for (const std::string bad : {"\"yes\"", "1", "null", "\"auto\""}) {
    SCOPED_TRACE(bad);
    try {
      parse_deepspeed_config(zero_section(3, R"(, "zero_quantized_gradients": )" + bad + "}"),
                             "ds.json");
      ADD_FAILURE() << "accepted";
    } catch (const accelerate::ConfigError& e) {
      const std::string message = e.what();
      EXPECT_THAT(message, HasSubstr("ds.json: zero_optimization.zero_quantized_gradients"));
      EXPECT_THAT(message, HasSubstr("true or false"));
      EXPECT_EQ(message.find('\n'), std::string::npos);
    }
  }
}

ShardingSettings resolved_from(const std::string& json) {
  accelerate::testing::TempDir dir("accelerate-zeropp-settings");
  const std::string path = dir.file("ds.json");
  std::ofstream(path) << json;
  accelerate::JobState job;
  job.rank = 1;  // no notes printed
  job.world_size = 2;
  job.local_world_size = 2;
  auto settings = accelerate::sharding::resolve_sharding_settings(
      AcceleratorOptions().deepspeed_plugin(DeepSpeedPlugin().hf_ds_config(path)),
      accelerate::Environment(), job, accelerate::MixedPrecision::kNo);
  if (!settings) throw std::runtime_error("no sharding settings");
  return *settings;
}

TEST(ZeroppSettings, ReachShardingSettingsAtStageThree) {
  const auto both = resolved_from(
      zero_section(3, R"(, "zero_quantized_weights": true, "zero_quantized_gradients": true})"));
  EXPECT_TRUE(both.quantized_weights);
  EXPECT_TRUE(both.quantized_gradients);
  const auto weights = resolved_from(zero_section(3, R"(, "zero_quantized_weights": true})"));
  EXPECT_TRUE(weights.quantized_weights);
  EXPECT_FALSE(weights.quantized_gradients);
  const auto off = resolved_from(zero_section(3, "}"));
  EXPECT_FALSE(off.quantized_weights);
  EXPECT_FALSE(off.quantized_gradients);
}

TEST(ZeroppSettings, BelowStageThreeNothingIsQuantized) {
  for (int stage : {0, 1, 2}) {
    SCOPED_TRACE(stage);
    const auto settings = resolved_from(zero_section(
        stage, R"(, "zero_quantized_weights": true, "zero_quantized_gradients": true})"));
    EXPECT_FALSE(settings.quantized_weights);
    EXPECT_FALSE(settings.quantized_gradients);
  }
}

TEST(ZeroppSettings, QuantizedGradientsTakeThePlaceOfCommunicationDataType) {
  const auto settings =
      resolved_from(R"({"communication_data_type": "bf16", "zero_optimization": {"stage": 3, )"
                    R"("zero_quantized_gradients": true}})");
  EXPECT_TRUE(settings.quantized_gradients);
  EXPECT_EQ(settings.reduce_dtype, std::nullopt);
  // Without qgZ the dtype stays.
  const auto bf16 =
      resolved_from(R"({"communication_data_type": "bf16", "zero_optimization": {"stage": 3}})");
  EXPECT_EQ(bf16.reduce_dtype, at::kBFloat16);
}

}  // namespace zeropp_settings_test
