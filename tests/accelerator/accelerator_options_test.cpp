// The Accelerator's reading side of the settings contract: every variable the
// launcher writes, read from AcceleratorOptions::environment (never from the
// process environment when a map is given), good and bad values, and options
// winning over the environment.
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/common/errors.h"

namespace accelerate {
namespace {

using std::chrono::milliseconds;

// A single CPU process whose whole environment is `env`; malloc is left alone
// (it is process-wide and another test checks it).
AcceleratorOptions reading(Environment env) {
  return AcceleratorOptions().environment(std::move(env)).tune_malloc(false);
}

std::string construction_error(const Environment& env) {
  try {
    Accelerator accelerator(reading(env));
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(AcceleratorEnvironment, NothingSetMeansTheDefaults) {
  Accelerator accelerator(reading({}));
  EXPECT_EQ(accelerator.gradient_accumulation_steps(), 1);
  EXPECT_EQ(accelerator.mixed_precision(), MixedPrecision::kNo);
  EXPECT_EQ(accelerator.num_processes(), 1);
  EXPECT_FALSE(accelerator.state().debug);
  EXPECT_EQ(accelerator.state().timeout, std::chrono::minutes(5));
  EXPECT_TRUE(accelerator.state().shared_memory_all_reduce);
  EXPECT_EQ(accelerator.get_logger("t").level(), LogLevel::kInfo);
}

TEST(AcceleratorEnvironment, ReadsEveryLauncherSetting) {
  Accelerator accelerator(reading({{"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4"},
                                   {"ACCELERATE_MIXED_PRECISION", "bf16"},
                                   {"ACCELERATE_USE_CPU", "true"},
                                   {"ACCELERATE_DEBUG_MODE", "1"},
                                   {"ACCELERATE_TIMEOUT", "2.5"},
                                   {"ACCELERATE_SHARED_MEMORY_ALLREDUCE", "no"},
                                   {"ACCELERATE_LOG_LEVEL", "error"}}));
  EXPECT_EQ(accelerator.gradient_accumulation_steps(), 4);
  EXPECT_EQ(accelerator.mixed_precision(), MixedPrecision::kBF16);
  EXPECT_TRUE(accelerator.state().use_cpu);
  EXPECT_TRUE(accelerator.state().debug);
  EXPECT_EQ(accelerator.state().timeout, milliseconds(2500));
  EXPECT_FALSE(accelerator.state().shared_memory_all_reduce);
  EXPECT_EQ(accelerator.get_logger("t").level(), LogLevel::kError);
  // The user's own logger options still win.
  EXPECT_EQ(accelerator.get_logger("t", LoggerOptions().level(LogLevel::kDebug)).level(),
            LogLevel::kDebug);
}

TEST(AcceleratorEnvironment, OptionsWinOverTheEnvironment) {
  const Environment env = {{"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4"},
                           {"ACCELERATE_MIXED_PRECISION", "bf16"},
                           {"ACCELERATE_TIMEOUT", "2.5"}};
  Accelerator accelerator(reading(env)
                              .gradient_accumulation_steps(2)
                              .mixed_precision(MixedPrecision::kNo)
                              .job_options(JobOptions().timeout(milliseconds(700))));
  EXPECT_EQ(accelerator.gradient_accumulation_steps(), 2);
  EXPECT_EQ(accelerator.mixed_precision(), MixedPrecision::kNo);
  EXPECT_EQ(accelerator.state().timeout, milliseconds(700));
}

TEST(AcceleratorEnvironment, TheProcessEnvironmentIsNotReadWhenAMapIsGiven) {
  ::setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "7", 1);
  ::setenv("ACCELERATE_MIXED_PRECISION", "fp8", 1);
  Accelerator accelerator(reading({}));
  EXPECT_EQ(accelerator.gradient_accumulation_steps(), 1);
  EXPECT_EQ(accelerator.mixed_precision(), MixedPrecision::kNo);
  ::unsetenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS");
  ::unsetenv("ACCELERATE_MIXED_PRECISION");
}

TEST(AcceleratorEnvironment, BadValuesNameTheVariableAndTheValue) {
  EXPECT_EQ(
      construction_error({{"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "0"}}),
      "ACCELERATE_GRADIENT_ACCUMULATION_STEPS expects a whole number from 1 to 1000000, got '0'");
  EXPECT_EQ(
      construction_error({{"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4x"}}),
      "ACCELERATE_GRADIENT_ACCUMULATION_STEPS expects a whole number from 1 to 1000000, got '4x'");
  EXPECT_EQ(
      construction_error({{"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "99999999999999999999"}}),
      "ACCELERATE_GRADIENT_ACCUMULATION_STEPS expects a whole number from 1 to 1000000, got "
      "'99999999999999999999'");
  EXPECT_EQ(construction_error({{"ACCELERATE_MIXED_PRECISION", "fp32"}}),
            "ACCELERATE_MIXED_PRECISION expects one of no, bf16, fp16, got 'fp32'");
  EXPECT_EQ(construction_error({{"ACCELERATE_USE_CPU", "sure"}}),
            "ACCELERATE_USE_CPU expects true or false (or 1/0, yes/no), got 'sure'");
  EXPECT_EQ(construction_error({{"ACCELERATE_DEBUG_MODE", "on"}}),
            "ACCELERATE_DEBUG_MODE expects true or false (or 1/0, yes/no), got 'on'");
  EXPECT_EQ(construction_error({{"ACCELERATE_TIMEOUT", "5m"}}),
            "ACCELERATE_TIMEOUT expects a positive number of seconds (e.g. 300 or 2.5), got '5m'");
  EXPECT_EQ(
      construction_error({{"ACCELERATE_SHARED_MEMORY_ALLREDUCE", "fast"}}),
      "ACCELERATE_SHARED_MEMORY_ALLREDUCE expects true or false (or 1/0, yes/no), got 'fast'");
  EXPECT_EQ(construction_error({{"RANK", "0"}, {"WORLD_SIZE", "two"}}),
            "WORLD_SIZE expects a whole number, got 'two'");
  // fp16 autocast does not exist on the CPU: refused at construction.
  EXPECT_NE(
      construction_error({{"ACCELERATE_MIXED_PRECISION", "fp16"}, {"ACCELERATE_USE_CPU", "1"}})
          .find("needs a CUDA device"),
      std::string::npos);
}

TEST(AcceleratorEnvironment, ABadLogLevelIsNamedWhenALoggerIsMade) {
  Accelerator accelerator(reading({{"ACCELERATE_LOG_LEVEL", "LOUD"}}));
  try {
    accelerator.get_logger("t");
    ADD_FAILURE() << "ACCELERATE_LOG_LEVEL=LOUD was accepted";
  } catch (const ConfigError& error) {
    EXPECT_STREQ(error.what(),
                 "ACCELERATE_LOG_LEVEL expects a log level (DEBUG, INFO, WARNING, ERROR or "
                 "CRITICAL), got 'LOUD'");
  }
}

TEST(AcceleratorEnvironment, IntraOpThreadsFollowOmpNumThreads) {
  const int before = at::get_num_threads();
  { Accelerator accelerator(reading({{"OMP_NUM_THREADS", "1"}})); }
  EXPECT_EQ(at::get_num_threads(), 1);
  // An OpenMP list ("4,2") or garbage keeps the library's own default rather
  // than failing: OpenMP itself accepts lists.
  EXPECT_NO_THROW({ Accelerator accelerator(reading({{"OMP_NUM_THREADS", "4,2"}})); });
  EXPECT_GE(at::get_num_threads(), 1);
  at::set_num_threads(before);
}

}  // namespace
}  // namespace accelerate
