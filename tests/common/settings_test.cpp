// The settings contract (src/common/settings.h): every setting's reading side
// with good and bad values, the one error format, the number parsers every
// reader shares, and the named enums.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "accelerate/backend.h"
#include "accelerate/errors.h"
#include "accelerate/log_level.h"
#include "accelerate/mixed_precision.h"
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
  EXPECT_EQ(read_error(setting, text),
            std::string(setting.variable()) + " expects " + setting.about.expected + ", got '" + text + "'")
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
  EXPECT_EQ(seen.size(), 11u);
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
    for (const auto& entry : std::filesystem::recursive_directory_iterator(std::string(ACCELERATE_SOURCE_DIR) + tree)) {
      const auto extension = entry.path().extension();
      if ((extension != ".cpp" && extension != ".h") || entry.path().filename() == "settings.cpp") continue;
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
  EXPECT_EQ(kGradientAccumulationSteps.read({{"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "1000000"}}), 1000000);
  for (const char* bad : {"0", "-2", "4x", " 4", "+4", "1e3", "1000001", "99999999999999999999"}) {
    expect_refused(kGradientAccumulationSteps, bad);
  }
  EXPECT_EQ(read_error(kGradientAccumulationSteps, "0"),
            "ACCELERATE_GRADIENT_ACCUMULATION_STEPS expects a whole number from 1 to 1000000, got '0'");
}

TEST(Settings, Booleans) {
  for (const Setting<bool>* flag : {&kUseCpu, &kDebugMode, &kSharedMemoryAllReduce}) {
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
  const auto read = [](const std::string& text) { return kTimeout.read({{"ACCELERATE_TIMEOUT", text}}); };
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
    EXPECT_EQ(std::string(error.what()),
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
  for (const char* bad : {"", "-", "+4", " 4", "4 ", "4x", "0x10", "1e3", "1.0", "9223372036854775808"}) {
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
