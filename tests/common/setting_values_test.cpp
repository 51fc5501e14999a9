// Values of settings with where each was written: the environment the ranks
// read, and the layer of values a launcher gives in front of its own
// environment; messages name the place (variable, flag, config key and line).
#include <gtest/gtest.h>

#include "accelerate/common/errors.h"
#include "common/setting_values.h"
#include "common/settings.h"

namespace accelerate::settings {
namespace {

TEST(SettingValues, OriginsNameTheirPlaceForBadValuesAndForValuesThatCannotRun) {
  const Origin variable = Origin::variable("ACCELERATE_MIXED_PRECISION");
  EXPECT_EQ(variable.subject(), "ACCELERATE_MIXED_PRECISION");
  EXPECT_EQ(variable.describe("fp16"), "ACCELERATE_MIXED_PRECISION=fp16 in the environment");
  const Origin flag = Origin::flag("--mixed-precision");
  EXPECT_EQ(flag.subject(), "--mixed-precision");
  EXPECT_EQ(flag.describe("fp16"), "--mixed-precision fp16");
  const Origin key = Origin::config_key("mixed_precision", "cfg.yaml", 3);
  EXPECT_EQ(key.subject(), "cfg.yaml:3: key 'mixed_precision'");
  EXPECT_EQ(key.describe("fp16"), "mixed_precision: fp16 (cfg.yaml:3)");
}

TEST(SettingValues, AnEnvironmentGivesItsNonEmptyVariables) {
  const Environment env{{"ACCELERATE_MIXED_PRECISION", "bf16"}, {"ACCELERATE_DEBUG_MODE", ""}};
  const EnvironmentValues values(env);
  const auto given = values.find("ACCELERATE_MIXED_PRECISION");
  ASSERT_TRUE(given.has_value());
  EXPECT_EQ(given->text, "bf16");
  EXPECT_EQ(given->origin.subject(), "ACCELERATE_MIXED_PRECISION");
  EXPECT_FALSE(values.find("ACCELERATE_DEBUG_MODE").has_value());  // empty is unset
  EXPECT_FALSE(values.find("ACCELERATE_USE_CPU").has_value());
  EXPECT_EQ(kMixedPrecision.read(values), MixedPrecision::kBF16);
}

TEST(SettingValues, GivenValuesHideTheEnvironmentBelowAndAreTheOnlyOnesWritten) {
  const Environment below{{"ACCELERATE_MIXED_PRECISION", "bf16"}, {"ACCELERATE_USE_CPU", "true"}};
  LayeredValues values(below);
  values.set(kMixedPrecision.variable(), {"fp16", Origin::flag("--mixed_precision")});
  values.set(kDebugMode.variable(), {"", Origin::flag("--debug")});
  EXPECT_EQ(kMixedPrecision.read(values), MixedPrecision::kFP16);
  EXPECT_EQ(kMixedPrecision.origin(values)->subject(), "--mixed_precision");
  EXPECT_EQ(kUseCpu.read(values), true);  // from below, named as its variable
  EXPECT_EQ(kUseCpu.origin(values)->subject(), "ACCELERATE_USE_CPU");
  EXPECT_FALSE(kDebugMode.read(values).has_value());  // given empty: not given
  EXPECT_FALSE(kDebugMode.origin(values).has_value());
  Environment written;
  values.write_to(written);
  EXPECT_EQ(written,
            (Environment{{"ACCELERATE_MIXED_PRECISION", "fp16"}, {"ACCELERATE_DEBUG_MODE", ""}}));
}

TEST(SettingValues, ABadValueIsRefusedNamingWhereItWasWritten) {
  LayeredValues values(Environment{});
  values.set(kZeroStage.variable(),
             {"5", Origin::config_key("deepspeed_config.zero_stage", "c.yaml", 7)});
  try {
    kZeroStage.read(values);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& error) {
    EXPECT_EQ(std::string(error.what()),
              "c.yaml:7: key 'deepspeed_config.zero_stage' expects 0, 1, 2 or 3, got '5'");
  }
  const Environment env{{"ACCELERATE_DEEPSPEED_ZERO_STAGE", "5"}};
  EXPECT_THROW(kZeroStage.read(env), ConfigError);
  try {
    kZeroStage.read(env);
  } catch (const ConfigError& error) {
    EXPECT_EQ(std::string(error.what()),
              "ACCELERATE_DEEPSPEED_ZERO_STAGE expects 0, 1, 2 or 3, got '5'");
  }
}

}  // namespace
}  // namespace accelerate::settings
