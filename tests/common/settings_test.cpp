// The settings contract (src/common/settings.h): every setting's reading side
// with good and bad values, the one error format, the number parsers every
// reader shares, and the named enums.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "accelerate/common/backend.h"
#include "accelerate/common/errors.h"
#include "accelerate/common/log_level.h"
#include "accelerate/common/mixed_precision.h"
#include "common/environment_text.h"
#include "common/settings.h"

namespace accelerate::settings {
namespace {

using std::chrono::milliseconds;

template <class T>
std::string read_error(const Setting<T>& setting, const std::string& text) {
  try {
    setting.read({{setting.variable(), text}});
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "(no error)";
}

// The one format, with the variable and the value the user wrote.
template <class T>
void expect_refused(const Setting<T>& setting, const std::string& text) {
  EXPECT_EQ(read_error(setting, text), std::string(setting.variable()) + " expects " +
                                           setting.about.expected + ", got '" + text + "'")
      << setting.variable() << "=" << text;
}

TEST(Settings, EveryVariableIsDeclaredOnceWithItsFacts) {
  std::set<std::string> seen;
  for (const Description& about : all()) {
    EXPECT_TRUE(seen.insert(about.variable).second) << about.variable << " twice";
    EXPECT_NE(std::string(about.expected), "") << about.variable;
    EXPECT_NE(std::string(about.default_text), "") << about.variable;
    EXPECT_NE(std::string(about.meaning), "") << about.variable;
  }
  EXPECT_EQ(seen.size(), 45u);
  EXPECT_EQ(seen.count("PARALLELISM_CONFIG_SP_SIZE"), 1u);
  EXPECT_EQ(seen.count("PARALLELISM_CONFIG_SP_BACKEND"), 1u);
  EXPECT_EQ(seen.count("PARALLELISM_CONFIG_TP_SEQUENCE_PARALLEL"), 1u);
  EXPECT_EQ(seen.count("ACCELERATE_MIXED_PRECISION"), 1u);
  EXPECT_EQ(seen.count("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"), 1u);
}

// docs/launching.md's contract table has a row for every declared setting.
TEST(Settings, TheUsersTableListsEverySetting) {
  std::ifstream file(std::string(ACCELERATE_SOURCE_DIR) + "/docs/launching.md");
  ASSERT_TRUE(file.good());
  std::stringstream text;
  text << file.rdbuf();
  for (const Description& about : all()) {
    EXPECT_NE(text.str().find(std::string("\n| `") + about.variable + "` |"), std::string::npos)
        << about.variable << " has no row in docs/launching.md";
  }
}

// The contract is the only place that spells an ACCELERATE_* variable in
// code (comments may mention them): a second spelling would be a second
// reader or writer with rules of its own.
TEST(Settings, OnlyTheContractSpellsAnAccelerateVariable) {
  for (const char* tree : {"/src", "/include"}) {
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(std::string(ACCELERATE_SOURCE_DIR) + tree)) {
      const auto extension = entry.path().extension();
      const auto name = entry.path().filename();
      // The contract's files: settings.cpp, its parallelism sizes, its kernels.
      if ((extension != ".cpp" && extension != ".h") || name == "settings.cpp" ||
          name == "parallelism_settings.cpp" || name == "kernel_settings.cpp")
        continue;
      std::ifstream file(entry.path());
      int line_number = 0;
      for (std::string line; std::getline(file, line);) {
        ++line_number;
        const std::string code = line.substr(0, line.find("//"));
        for (const Description& about : all()) {
          const std::string variable = about.variable;
          if (variable.rfind("ACCELERATE_", 0) != 0) continue;
          EXPECT_EQ(code.find(variable), std::string::npos)
              << entry.path().string() << ":" << line_number << " spells " << variable
              << " (use src/common/settings.h)";
        }
      }
    }
  }
}

TEST(Settings, UnsetOrEmptyMeansTheDefault) {
  EXPECT_FALSE(kMixedPrecision.read({}).has_value());
  EXPECT_FALSE(kMixedPrecision.read({{"ACCELERATE_MIXED_PRECISION", ""}}).has_value());
  EXPECT_EQ(kMixedPrecision.read_or_default({}), MixedPrecision::kNo);
  EXPECT_EQ(kGradientAccumulationSteps.read_or_default({}), 1);
  EXPECT_FALSE(kUseCpu.read_or_default({}));
  EXPECT_FALSE(kDebugMode.read_or_default({}));
  EXPECT_EQ(kTimeout.read_or_default({}), std::chrono::minutes(5));
  EXPECT_EQ(kLogLevel.read_or_default({}), LogLevel::kInfo);
  EXPECT_TRUE(kSharedMemoryAllReduce.read_or_default({}));
  EXPECT_EQ(kRestartCount.read_or_default({}), 0);
}

TEST(Settings, MixedPrecision) {
  EXPECT_EQ(kMixedPrecision.read({{"ACCELERATE_MIXED_PRECISION", "bf16"}}), MixedPrecision::kBF16);
  EXPECT_EQ(kMixedPrecision.read({{"ACCELERATE_MIXED_PRECISION", "fp16"}}), MixedPrecision::kFP16);
  EXPECT_EQ(kMixedPrecision.read({{"ACCELERATE_MIXED_PRECISION", "no"}}), MixedPrecision::kNo);
  expect_refused(kMixedPrecision, "fp8");
  expect_refused(kMixedPrecision, "BF16");  // Accelerate's environment is exact
  EXPECT_EQ(read_error(kMixedPrecision, "fp8"),
            "ACCELERATE_MIXED_PRECISION expects one of no, bf16, fp16, got 'fp8'");
}

TEST(Settings, GradientAccumulationSteps) {
  EXPECT_EQ(kGradientAccumulationSteps.read({{"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4"}}), 4);
  EXPECT_EQ(
      kGradientAccumulationSteps.read({{"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "1000000"}}),
      1000000);
  for (const char* bad : {"0", "-2", "4x", " 4", "+4", "1e3", "1000001", "99999999999999999999"}) {
    expect_refused(kGradientAccumulationSteps, bad);
  }
  EXPECT_EQ(
      read_error(kGradientAccumulationSteps, "0"),
      "ACCELERATE_GRADIENT_ACCUMULATION_STEPS expects a whole number from 1 to 1000000, got '0'");
}

TEST(Settings, Booleans) {
  for (const Setting<bool>* flag : {&kUseCpu, &kDebugMode, &kSharedMemoryAllReduce, &kUseDeepSpeed,
                                    &kUseFsdp, &kZero3Init, &kZero3Save16BitModel}) {
    for (const char* yes : {"1", "true", "TRUE", "yes", "Yes"}) {
      EXPECT_EQ(flag->read({{flag->variable(), yes}}), true) << flag->variable() << "=" << yes;
    }
    for (const char* no : {"0", "false", "False", "no", "NO"}) {
      EXPECT_EQ(flag->read({{flag->variable(), no}}), false) << flag->variable() << "=" << no;
    }
    expect_refused(*flag, "maybe");
    expect_refused(*flag, "on");
    expect_refused(*flag, "2");
  }
}

TEST(Settings, TimeoutInSeconds) {
  const auto read = [](const std::string& text) {
    return kTimeout.read({{"ACCELERATE_TIMEOUT", text}});
  };
  EXPECT_EQ(read("300"), milliseconds(300000));
  EXPECT_EQ(read("2.5"), milliseconds(2500));
  EXPECT_EQ(read(".5"), milliseconds(500));
  EXPECT_EQ(read("5."), milliseconds(5000));
  EXPECT_EQ(read("0.001"), milliseconds(1));
  EXPECT_EQ(read("1.23456"), milliseconds(1234));  // finer than 1 ms is dropped
  for (const char* bad : {"0", "0.0004", "-5", "2.5s", "1.2.3", ".", "1e3", "nan", "99999999999"}) {
    expect_refused(kTimeout, bad);
  }
  EXPECT_EQ(read_error(kTimeout, "-5"),
            "ACCELERATE_TIMEOUT expects a positive number of seconds (e.g. 300 or 2.5), got '-5'");
}

TEST(Settings, LogLevel) {
  EXPECT_EQ(kLogLevel.read({{"ACCELERATE_LOG_LEVEL", "warning"}}), LogLevel::kWarning);
  EXPECT_EQ(kLogLevel.read({{"ACCELERATE_LOG_LEVEL", "Debug"}}), LogLevel::kDebug);
  EXPECT_EQ(kLogLevel.read({{"ACCELERATE_LOG_LEVEL", "40"}}), LogLevel::kError);
  EXPECT_EQ(kLogLevel.read({{"ACCELERATE_LOG_LEVEL", "FATAL"}}), LogLevel::kCritical);
  expect_refused(kLogLevel, "LOUD");
  expect_refused(kLogLevel, "25");
  // The public throwing parser uses the same format with its own subject.
  try {
    parse_log_level("LOUD", "LoggerOptions");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& error) {
    EXPECT_EQ(
        std::string(error.what()),
        "LoggerOptions expects a log level (DEBUG, INFO, WARNING, ERROR or CRITICAL), got 'LOUD'");
  }
}

TEST(Settings, RestartCountAndThreads) {
  EXPECT_EQ(kRestartCount.read({{"ACCELERATE_RESTART_COUNT", "0"}}), 0);
  EXPECT_EQ(kRestartCount.read({{"ACCELERATE_RESTART_COUNT", "3"}}), 3);
  expect_refused(kRestartCount, "-1");
  EXPECT_EQ(kOmpNumThreads.read({{"OMP_NUM_THREADS", "2"}}), 2);
  expect_refused(kOmpNumThreads, "0");
  expect_refused(kOpenblasNumThreads, "two");
  EXPECT_EQ(kOmpWaitPolicy.read({{"OMP_WAIT_POLICY", "passive"}}), "PASSIVE");
  EXPECT_EQ(kOmpWaitPolicy.read({{"OMP_WAIT_POLICY", "Active"}}), "ACTIVE");
  expect_refused(kOmpWaitPolicy, "lazy");
  EXPECT_EQ(kOpenblasThreadTimeout.read({{"OPENBLAS_THREAD_TIMEOUT", "4"}}), 4);
  EXPECT_EQ(kOpenblasThreadTimeout.read({{"OPENBLAS_THREAD_TIMEOUT", "30"}}), 30);
  expect_refused(kOpenblasThreadTimeout, "3");
  expect_refused(kOpenblasThreadTimeout, "31");
  EXPECT_EQ(kOpenblasCoretype.read({{"OPENBLAS_CORETYPE", "SkylakeX"}}), "SkylakeX");
  expect_refused(kOpenblasCoretype, "Skylake X");
}

TEST(Settings, OffloadOnCpuJob) {
  EXPECT_FALSE(kOffloadOnCpuJob.read_or_default({}));
  EXPECT_EQ(kOffloadOnCpuJob.read({{"ACCELERATE_OFFLOAD_ON_CPU_JOB", "true"}}), true);
  expect_refused(kOffloadOnCpuJob, "sometimes");
}

TEST(Settings, ShardedTrainingDefaults) {
  EXPECT_FALSE(kUseDeepSpeed.read_or_default({}));
  EXPECT_FALSE(kUseFsdp.read_or_default({}));
  EXPECT_EQ(kZeroStage.read_or_default({}), 2);  // Accelerate's default stage
  EXPECT_EQ(kDeepSpeedConfigFile.read_or_default({}), "none");
  EXPECT_FALSE(kGradientClipping.read({}).has_value());
  EXPECT_EQ(kOffloadOptimizerDevice.read_or_default({}), OffloadDevice::kNone);
  EXPECT_EQ(kFsdpShardingStrategy.read_or_default({}), FsdpShardingStrategy::kFullShard);
  EXPECT_EQ(kFsdpVersion.read_or_default({}), 1);
}

TEST(Settings, ZeroStageAndGradientClipping) {
  for (int stage = 0; stage <= 3; ++stage) {
    EXPECT_EQ(kZeroStage.read({{"ACCELERATE_DEEPSPEED_ZERO_STAGE", std::to_string(stage)}}), stage);
  }
  for (const char* bad : {"4", "-1", "two", "2.0", " 2"}) expect_refused(kZeroStage, bad);
  EXPECT_EQ(read_error(kZeroStage, "4"),
            "ACCELERATE_DEEPSPEED_ZERO_STAGE expects 0, 1, 2 or 3, got '4'");

  const auto clip = [](const std::string& text) {
    return kGradientClipping.read({{"ACCELERATE_GRADIENT_CLIPPING", text}});
  };
  EXPECT_EQ(clip("1.0"), 1.0);
  EXPECT_EQ(clip("0"), 0.0);
  EXPECT_EQ(clip(".5"), 0.5);
  EXPECT_EQ(clip("1e-3"), 0.001);
  for (const char* bad : {"-1", "+1", "inf", "nan", "1,5", " 1", "1e", "1e999", "auto"}) {
    expect_refused(kGradientClipping, bad);
  }
  EXPECT_EQ(read_error(kGradientClipping, "-1"),
            "ACCELERATE_GRADIENT_CLIPPING expects a number >= 0 (e.g. 1.0), got '-1'");
}

TEST(Settings, OffloadDevicesRefuseNvmeInOneLine) {
  for (const Setting<OffloadDevice>* device : {&kOffloadOptimizerDevice, &kOffloadParamDevice}) {
    EXPECT_EQ(device->read({{device->variable(), "cpu"}}), OffloadDevice::kCpu);
    EXPECT_EQ(device->read({{device->variable(), "CPU"}}),
              OffloadDevice::kCpu);  // Accelerate lowercases it
    EXPECT_EQ(device->read({{device->variable(), "none"}}), OffloadDevice::kNone);
    expect_refused(*device, "nvme");
    expect_refused(*device, "gpu");
  }
  EXPECT_EQ(read_error(kOffloadOptimizerDevice, "nvme"),
            "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE expects none or cpu (nvme offloading is "
            "not supported by "
            "accelerate-cpp), got 'nvme'");
}

TEST(Settings, FsdpStrategiesByNameOrNumber) {
  const char* names[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
                         "HYBRID_SHARD_ZERO2"};
  for (int number = 1; number <= 5; ++number) {
    const auto strategy = static_cast<FsdpShardingStrategy>(number);
    EXPECT_STREQ(to_string(strategy), names[number - 1]);
    EXPECT_EQ(kFsdpShardingStrategy.read({{"FSDP_SHARDING_STRATEGY", names[number - 1]}}),
              strategy);
    EXPECT_EQ(kFsdpShardingStrategy.read({{"FSDP_SHARDING_STRATEGY", std::to_string(number)}}),
              strategy);
  }
  EXPECT_EQ(kFsdpShardingStrategy.read({{"FSDP_SHARDING_STRATEGY", "shard_grad_op"}}),
            FsdpShardingStrategy::kShardGradOp);  // Accelerate upper-cases the name
  for (const char* bad : {"0", "6", "FULL", "ZERO2"}) expect_refused(kFsdpShardingStrategy, bad);
  EXPECT_EQ(read_error(kFsdpShardingStrategy, "ZERO2"),
            "FSDP_SHARDING_STRATEGY expects FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD or "
            "HYBRID_SHARD_ZERO2 (or 1-5), got 'ZERO2'");
  // FSDP 1 writes a strategy here, FSDP 2 a boolean; both are kept in one spelling.
  const auto reshard = [](const std::string& text) {
    return kFsdpReshardAfterForward.read({{"FSDP_RESHARD_AFTER_FORWARD", text}});
  };
  EXPECT_EQ(reshard("shard_grad_op"), "SHARD_GRAD_OP");
  EXPECT_EQ(reshard("2"), "SHARD_GRAD_OP");
  EXPECT_EQ(reshard("False"), "false");
  EXPECT_EQ(reshard("yes"), "true");
  expect_refused(kFsdpReshardAfterForward, "maybe");
  EXPECT_EQ(kFsdpVersion.read({{"FSDP_VERSION", "2"}}), 2);
  expect_refused(kFsdpVersion, "3");
  EXPECT_EQ(read_error(kFsdpVersion, "3"), "FSDP_VERSION expects 1 or 2, got '3'");
}

// FULL_SHARD's wrap policy and the FSDP settings accepted beside it, as
// Accelerate's FullyShardedDataParallelPlugin reads them.
TEST(Settings, FsdpWrapPolicyAndTuningVariables) {
  EXPECT_EQ(kFsdpAutoWrapPolicy.read_or_default({}), FsdpAutoWrapPolicy::kNoWrap);
  EXPECT_EQ(kFsdpAutoWrapPolicy.read({{"FSDP_AUTO_WRAP_POLICY", "transformer_based_wrap"}}),
            FsdpAutoWrapPolicy::kTransformerBasedWrap);  // Accelerate upper-cases it
  EXPECT_EQ(kFsdpAutoWrapPolicy.read({{"FSDP_AUTO_WRAP_POLICY", "SIZE_BASED_WRAP"}}),
            FsdpAutoWrapPolicy::kSizeBasedWrap);
  EXPECT_EQ(read_error(kFsdpAutoWrapPolicy, "1"),
            "FSDP_AUTO_WRAP_POLICY expects TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP, "
            "got '1'");
  EXPECT_EQ(kFsdpTransformerClsToWrap.read({{"FSDP_TRANSFORMER_CLS_TO_WRAP", "Block,Mlp"}}),
            "Block,Mlp");
  expect_refused(kFsdpTransformerClsToWrap, ", ,");
  // Accelerate's launcher passes 1e8 when nothing sets it; 0 drops the policy.
  EXPECT_EQ(kFsdpMinNumParams.read_or_default({}), 100000000);
  EXPECT_EQ(kFsdpMinNumParams.read({{"FSDP_MIN_NUM_PARAMS", "0"}}), 0);
  EXPECT_EQ(kFsdpMinNumParams.read({{"FSDP_MIN_NUM_PARAMS", "20000000000"}}), 20000000000LL);
  for (const char* bad : {"-1", "1e8", "many"}) expect_refused(kFsdpMinNumParams, bad);
  EXPECT_EQ(kFsdpBackwardPrefetch.read_or_default({}), FsdpBackwardPrefetch::kNoPrefetch);
  EXPECT_EQ(kFsdpBackwardPrefetch.read({{"FSDP_BACKWARD_PREFETCH", "backward_pre"}}),
            FsdpBackwardPrefetch::kBackwardPre);
  EXPECT_EQ(kFsdpBackwardPrefetch.read({{"FSDP_BACKWARD_PREFETCH", "2"}}),
            FsdpBackwardPrefetch::kBackwardPost);  // PyTorch's number
  expect_refused(kFsdpBackwardPrefetch, "3");
  EXPECT_FALSE(kFsdpForwardPrefetch.read_or_default({}));
  EXPECT_FALSE(kFsdpOffloadParams.read_or_default({}));
  EXPECT_EQ(kFsdpOffloadParams.read({{"FSDP_OFFLOAD_PARAMS", "True"}}), true);
  EXPECT_EQ(kFsdpStateDictType.read({{"FSDP_STATE_DICT_TYPE", "sharded_state_dict"}}),
            FsdpStateDictType::kShardedStateDict);
  EXPECT_EQ(kFsdpStateDictType.read({{"FSDP_STATE_DICT_TYPE", "2"}}),
            FsdpStateDictType::kLocalStateDict);
  expect_refused(kFsdpStateDictType, "FULL");
  Environment env;
  kFsdpAutoWrapPolicy.write(env, FsdpAutoWrapPolicy::kSizeBasedWrap);
  kFsdpMinNumParams.write(env, 2000);
  kFsdpBackwardPrefetch.write(env, FsdpBackwardPrefetch::kBackwardPost);
  EXPECT_EQ(env.at("FSDP_AUTO_WRAP_POLICY"), "SIZE_BASED_WRAP");
  EXPECT_EQ(env.at("FSDP_MIN_NUM_PARAMS"), "2000");
  EXPECT_EQ(env.at("FSDP_BACKWARD_PREFETCH"), "BACKWARD_POST");
}

// Accelerate's FSDP_CPU_RAM_EFFICIENT_LOADING (default false) and
// FSDP_SYNC_MODULE_STATES (default true), booleans as Accelerate reads them.
TEST(Settings, FsdpCpuRamEfficientLoadingAndSyncModuleStates) {
  EXPECT_FALSE(kFsdpCpuRamEfficientLoading.read_or_default({}));
  EXPECT_TRUE(kFsdpSyncModuleStates.read_or_default({}));
  EXPECT_EQ(kFsdpCpuRamEfficientLoading.read({{"FSDP_CPU_RAM_EFFICIENT_LOADING", "True"}}), true);
  EXPECT_EQ(kFsdpCpuRamEfficientLoading.read({{"FSDP_CPU_RAM_EFFICIENT_LOADING", "0"}}), false);
  EXPECT_EQ(kFsdpSyncModuleStates.read({{"FSDP_SYNC_MODULE_STATES", "false"}}), false);
  EXPECT_EQ(kFsdpSyncModuleStates.read({{"FSDP_SYNC_MODULE_STATES", "yes"}}), true);
  EXPECT_EQ(read_error(kFsdpCpuRamEfficientLoading, "maybe"),
            "FSDP_CPU_RAM_EFFICIENT_LOADING expects true or false (or 1/0, yes/no), got 'maybe'");
  EXPECT_EQ(read_error(kFsdpSyncModuleStates, "maybe"),
            "FSDP_SYNC_MODULE_STATES expects true or false (or 1/0, yes/no), got 'maybe'");
  Environment env;
  kFsdpCpuRamEfficientLoading.write(env, true);
  kFsdpSyncModuleStates.write(env, false);
  EXPECT_EQ(env.at("FSDP_CPU_RAM_EFFICIENT_LOADING"), "true");
  EXPECT_EQ(env.at("FSDP_SYNC_MODULE_STATES"), "false");
}

TEST(Settings, WrittenValuesReadBackAsWritten) {
  Environment env;
  kMixedPrecision.write(env, MixedPrecision::kFP16);
  kGradientAccumulationSteps.write(env, 8);
  kUseCpu.write(env, true);
  kTimeout.write(env, milliseconds(2500));
  kLogLevel.write(env, LogLevel::kError);
  EXPECT_EQ(env.at("ACCELERATE_MIXED_PRECISION"), "fp16");
  EXPECT_EQ(env.at("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"), "8");
  EXPECT_EQ(env.at("ACCELERATE_USE_CPU"), "true");
  EXPECT_EQ(env.at("ACCELERATE_TIMEOUT"), "2.5");
  EXPECT_EQ(env.at("ACCELERATE_LOG_LEVEL"), "ERROR");
  EXPECT_EQ(kMixedPrecision.read(env), MixedPrecision::kFP16);
  EXPECT_EQ(kGradientAccumulationSteps.read(env), 8);
  EXPECT_EQ(kUseCpu.read(env), true);
  EXPECT_EQ(kTimeout.read(env), milliseconds(2500));
  EXPECT_EQ(kLogLevel.read(env), LogLevel::kError);
  kGradientClipping.write(env, 1.0);
  EXPECT_EQ(env.at("ACCELERATE_GRADIENT_CLIPPING"), "1.0");  // as Accelerate's str(float) writes it
  kGradientClipping.write(env, 1e-5);
  EXPECT_EQ(env.at("ACCELERATE_GRADIENT_CLIPPING"), "1e-05");
  EXPECT_EQ(kGradientClipping.read(env), 1e-5);
  kFsdpShardingStrategy.write(env, FsdpShardingStrategy::kNoShard);
  EXPECT_EQ(env.at("FSDP_SHARDING_STRATEGY"), "NO_SHARD");
  kOffloadParamDevice.write(env, OffloadDevice::kCpu);
  EXPECT_EQ(env.at("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE"), "cpu");
  kTimeout.write(env, std::chrono::minutes(5));
  EXPECT_EQ(env.at("ACCELERATE_TIMEOUT"), "300");
  kTimeout.write(env, milliseconds(1));
  EXPECT_EQ(env.at("ACCELERATE_TIMEOUT"), "0.001");
}

TEST(Settings, ParsingUnderAnotherNameKeepsTheFormat) {
  EXPECT_EQ(kMixedPrecision.problem("--mixed_precision", "fp8"),
            "--mixed_precision expects one of no, bf16, fp16, got 'fp8'");
  EXPECT_THROW(kGradientAccumulationSteps.parse("key 'x'", "0"), ConfigError);
  EXPECT_EQ(kGradientAccumulationSteps.parse("key 'x'", "3"), 3);
  // A value echoed into a message cannot break the line.
  EXPECT_EQ(bad_value_message("X", "a number", "4\n2"), "X expects a number, got '4?2'");
}

TEST(NumberText, WholeNumbersAreStrict) {
  using detail::parse_integer;
  EXPECT_EQ(parse_integer("0"), 0);
  EXPECT_EQ(parse_integer("-3"), -3);
  EXPECT_EQ(parse_integer("007"), 7);
  EXPECT_EQ(parse_integer("9223372036854775807"), 9223372036854775807LL);
  for (const char* bad :
       {"", "-", "+4", " 4", "4 ", "4x", "0x10", "1e3", "1.0", "9223372036854775808"}) {
    EXPECT_FALSE(parse_integer(bad).has_value()) << "'" << bad << "'";
  }
  EXPECT_EQ(detail::parse_integer_in("5", 1, 5), 5);
  EXPECT_FALSE(detail::parse_integer_in("6", 1, 5).has_value());
  EXPECT_FALSE(detail::parse_integer_in("0", 1, 5).has_value());
  EXPECT_EQ(detail::parse_digits("12"), 12);
  EXPECT_FALSE(detail::parse_digits("-1").has_value());
  EXPECT_FALSE(detail::parse_digits("2147483648").has_value());
}

TEST(NumberText, SecondsAreReadWithoutTheLocale) {
  using detail::parse_seconds_as_milliseconds;
  EXPECT_EQ(parse_seconds_as_milliseconds("0"), 0);
  EXPECT_EQ(parse_seconds_as_milliseconds("0.1"), 100);
  EXPECT_EQ(parse_seconds_as_milliseconds("1000000000"), 1000000000000LL);
  for (const char* bad : {"", ".", "-1", "+1", "1,5", "1.2.3", "1000000001", "inf", " 1"}) {
    EXPECT_FALSE(parse_seconds_as_milliseconds(bad).has_value()) << "'" << bad << "'";
  }
}

TEST(NumberText, NonNegativeNumbersAndPythonsFloatText) {
  using detail::parse_non_negative_number;
  using detail::python_float_text;
  EXPECT_EQ(parse_non_negative_number("2.5e1"), 25.0);
  EXPECT_EQ(parse_non_negative_number("5."), 5.0);
  for (const char* bad : {"", ".", "-0", "+1", "1 ", "0x10", "infinity", "NaN", "1e+", "--1"}) {
    EXPECT_FALSE(parse_non_negative_number(bad).has_value()) << "'" << bad << "'";
  }
  // What Python's repr() writes: Accelerate passes floats on with str().
  EXPECT_EQ(python_float_text(1.0), "1.0");
  EXPECT_EQ(python_float_text(0.5), "0.5");
  EXPECT_EQ(python_float_text(0.0), "0.0");
  EXPECT_EQ(python_float_text(0.0001), "0.0001");
  EXPECT_EQ(python_float_text(1e-05), "1e-05");
  EXPECT_EQ(python_float_text(123.25), "123.25");
  EXPECT_EQ(python_float_text(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_text(1e16), "1e+16");
  EXPECT_EQ(python_float_text(1.5e300), "1.5e+300");
  EXPECT_EQ(python_float_text(0.1 + 0.2), "0.30000000000000004");
}

TEST(NamedValues, MixedPrecisionRoundTrips) {
  for (MixedPrecision precision : kAllMixedPrecisions) {
    EXPECT_EQ(parse_mixed_precision(to_string(precision)), precision);
  }
  EXPECT_STREQ(to_string(MixedPrecision::kBF16), "bf16");
  EXPECT_FALSE(parse_mixed_precision("").has_value());
  EXPECT_STREQ(to_string(Backend::kGloo), "gloo");
  EXPECT_STREQ(to_string(Backend::kNccl), "nccl");
  EXPECT_STREQ(to_string(Backend::kNone), "none");
}

}  // namespace
}  // namespace accelerate::settings
