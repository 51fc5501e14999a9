// The enum name tables (accelerate/detail/enum_names.h), and every public
// torch-free enum read back from its own name. The public enums whose names
// live in the LibTorch part are read back in
// tests/trainer/public_enum_names_test.cpp.
#include <gtest/gtest.h>

#include <array>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>

#include "accelerate/common/backend.h"
#include "accelerate/common/distributed_type.h"
#include "accelerate/common/job_state.h"
#include "accelerate/common/log_level.h"
#include "accelerate/common/malloc_tuning.h"
#include "accelerate/common/mixed_precision.h"
#include "accelerate/detail/enum_names.h"
#include "accelerate/sharding/deepspeed_plugin.h"
#include "accelerate/sharding/fsdp_plugin.h"
#include "common/settings.h"

namespace accelerate {
namespace {

using detail::EnumName;
using detail::NameCase;

enum class Colour { kRed = 1, kGreen = 2, kBlue = 7 };

constexpr EnumName<Colour> kColourNames[] = {{Colour::kRed, "RED", {"1"}},
                                             {Colour::kGreen, "GREEN", {"GRUEN", "2"}},
                                             {Colour::kBlue, "BLUE"}};

// Usable in constant expressions, so each table is checked where it is written.
static_assert(detail::names_are_distinct(kColourNames));
static_assert(detail::parse_enum(kColourNames, "gruen", NameCase::kAnyCase) == Colour::kGreen);
static_assert(detail::same_values(kColourNames, std::array<Colour, 3>{Colour::kRed, Colour::kGreen,
                                                                      Colour::kBlue}));

TEST(EnumNames, ToStringWritesTheNameOrTheCallersFallback) {
  EXPECT_STREQ(detail::enum_name(kColourNames, Colour::kGreen, "?"), "GREEN");
  EXPECT_STREQ(detail::enum_name(kColourNames, Colour::kBlue, "?"), "BLUE");
  EXPECT_STREQ(detail::enum_name(kColourNames, static_cast<Colour>(3), "an unknown colour"),
               "an unknown colour");
}

TEST(EnumNames, ExactParsingTakesOnlyTheSpellingsAsWritten) {
  EXPECT_EQ(detail::parse_enum(kColourNames, "RED", NameCase::kExact), Colour::kRed);
  EXPECT_EQ(detail::parse_enum(kColourNames, "1", NameCase::kExact), Colour::kRed);
  EXPECT_EQ(detail::parse_enum(kColourNames, "GRUEN", NameCase::kExact), Colour::kGreen);
  EXPECT_EQ(detail::parse_enum(kColourNames, "2", NameCase::kExact), Colour::kGreen);
  for (const char* text : {"red", "Blue", "gruen", "7", "", " RED", "RED ", "RE", "REDS", "3"}) {
    EXPECT_FALSE(detail::parse_enum(kColourNames, text, NameCase::kExact)) << "'" << text << "'";
  }
}

TEST(EnumNames, AnyCaseParsingFoldsAsciiLettersOnly) {
  EXPECT_EQ(detail::parse_enum(kColourNames, "red", NameCase::kAnyCase), Colour::kRed);
  EXPECT_EQ(detail::parse_enum(kColourNames, "bLuE", NameCase::kAnyCase), Colour::kBlue);
  EXPECT_EQ(detail::parse_enum(kColourNames, "Gruen", NameCase::kAnyCase), Colour::kGreen);
  // An empty alias slot is no spelling, and nothing else is stretched to fit.
  for (const char* text : {"", "7", "RED_", "gr\xc3\xbcn", "BLUE\n"}) {
    EXPECT_FALSE(detail::parse_enum(kColourNames, text, NameCase::kAnyCase)) << "'" << text << "'";
  }
}

TEST(EnumNames, DistinctnessCatchesARepeatedValueOrSpelling) {
  constexpr EnumName<Colour> kValueTwice[] = {{Colour::kRed, "RED"}, {Colour::kRed, "CRIMSON"}};
  constexpr EnumName<Colour> kNameTwiceInTwoCases[] = {{Colour::kRed, "RED"},
                                                       {Colour::kBlue, "red"}};
  constexpr EnumName<Colour> kAliasIsAnotherName[] = {{Colour::kRed, "RED"},
                                                      {Colour::kBlue, "BLUE", {"Red"}}};
  constexpr EnumName<Colour> kAliasTwice[] = {{Colour::kRed, "RED", {"1"}},
                                              {Colour::kBlue, "BLUE", {"X", "1"}}};
  constexpr EnumName<Colour> kAliasIsItsOwnName[] = {{Colour::kRed, "RED", {"RED"}}};
  EXPECT_FALSE(detail::names_are_distinct(kValueTwice));
  EXPECT_FALSE(detail::names_are_distinct(kNameTwiceInTwoCases));
  EXPECT_FALSE(detail::names_are_distinct(kAliasIsAnotherName));
  EXPECT_FALSE(detail::names_are_distinct(kAliasTwice));
  EXPECT_FALSE(detail::names_are_distinct(kAliasIsItsOwnName));
  EXPECT_TRUE(detail::names_are_distinct(kColourNames));
}

TEST(EnumNames, SameValuesMeansTheSameOrderToo) {
  using Three = std::array<Colour, 3>;
  EXPECT_TRUE(
      detail::same_values(kColourNames, Three{Colour::kRed, Colour::kGreen, Colour::kBlue}));
  EXPECT_FALSE(
      detail::same_values(kColourNames, Three{Colour::kGreen, Colour::kRed, Colour::kBlue}));
  EXPECT_FALSE(
      detail::same_values(kColourNames, std::array<Colour, 2>{Colour::kRed, Colour::kGreen}));
}

// ---- Every value of every public torch-free enum, read back from its name ----

TEST(EnumRoundTrip, MixedPrecision) {
  for (MixedPrecision value : {MixedPrecision::kNo, MixedPrecision::kBF16, MixedPrecision::kFP16}) {
    EXPECT_EQ(parse_mixed_precision(to_string(value)), value) << to_string(value);
  }
}

TEST(EnumRoundTrip, LogLevel) {
  for (LogLevel value : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning, LogLevel::kError,
                         LogLevel::kCritical}) {
    EXPECT_EQ(parse_log_level(std::string_view(to_string(value))), value) << to_string(value);
    // Python's number for the level is accepted too.
    EXPECT_EQ(parse_log_level(std::to_string(static_cast<int>(value))), value);
  }
}

TEST(EnumRoundTrip, DistributedType) {
  for (DistributedType value :
       {DistributedType::kNo, DistributedType::kMultiCpu, DistributedType::kMultiGpu,
        DistributedType::kDeepSpeed, DistributedType::kFsdp}) {
    EXPECT_EQ(parse_distributed_type(to_string(value)), value) << to_string(value);
  }
}

// The plugins' enums are parsed by their settings (the FSDP_* and
// ACCELERATE_DEEPSPEED_* variables), which also write them.
template <class E>
void expect_setting_round_trips(const settings::Setting<E>& setting,
                                std::initializer_list<E> values) {
  for (E value : values) {
    EXPECT_EQ(setting.try_parse(to_string(value)), value)
        << setting.variable() << " " << to_string(value);
    Environment env;
    setting.write(env, value);
    EXPECT_EQ(setting.read(env), value) << setting.variable() << " " << to_string(value);
  }
}

TEST(EnumRoundTrip, PluginEnums) {
  expect_setting_round_trips(settings::kOffloadOptimizerDevice,
                             {OffloadDevice::kNone, OffloadDevice::kCpu});
  expect_setting_round_trips(settings::kFsdpShardingStrategy,
                             {FsdpShardingStrategy::kFullShard, FsdpShardingStrategy::kShardGradOp,
                              FsdpShardingStrategy::kNoShard, FsdpShardingStrategy::kHybridShard,
                              FsdpShardingStrategy::kHybridShardZero2});
  expect_setting_round_trips(settings::kFsdpAutoWrapPolicy,
                             {FsdpAutoWrapPolicy::kTransformerBasedWrap,
                              FsdpAutoWrapPolicy::kSizeBasedWrap, FsdpAutoWrapPolicy::kNoWrap});
  expect_setting_round_trips(settings::kFsdpBackwardPrefetch, {FsdpBackwardPrefetch::kBackwardPre,
                                                               FsdpBackwardPrefetch::kBackwardPost,
                                                               FsdpBackwardPrefetch::kNoPrefetch});
  expect_setting_round_trips(settings::kFsdpStateDictType,
                             {FsdpStateDictType::kFullStateDict, FsdpStateDictType::kLocalStateDict,
                              FsdpStateDictType::kShardedStateDict});
}

// Enums that are only ever written (no parser): every value has its own
// name, and none is the fallback for a value without one.
template <class E>
void expect_distinct_names(std::initializer_list<E> values, const std::string& fallback) {
  std::set<std::string> seen;
  for (E value : values) {
    const std::string name = to_string(value);
    EXPECT_NE(name, fallback);
    EXPECT_TRUE(seen.insert(name).second) << name << " twice";
  }
}

TEST(EnumRoundTrip, WrittenOnlyEnumsHaveOneNameEach) {
  expect_distinct_names({Backend::kNone, Backend::kGloo, Backend::kNccl}, "?");
  expect_distinct_names({LaunchSource::kSingleProcess, LaunchSource::kTorchrun, LaunchSource::kMpi,
                         LaunchSource::kSlurm},
                        "unknown");
  expect_distinct_names({MallocTuningResult::kApplied, MallocTuningResult::kLeftToEnvironment,
                         MallocTuningResult::kUnsupported},
                        "unknown");
  EXPECT_STREQ(to_string(static_cast<LaunchSource>(99)), "unknown");
}

}  // namespace
}  // namespace accelerate
