// A bad ACCELERATE_CPU_CAPABILITY stops a real program (training_probe,
// which builds an Accelerator first) with one line naming the problem and a
// non-zero exit, run directly and through `accelerate launch`.
#include <gtest/gtest.h>

#include <string>

#include "support/launcher_process.h"

namespace accelerate::launcher {
namespace {

using namespace std::chrono_literals;
using testing::run_launcher;
using testing::run_program;
using testing::RunResult;
using testing::split_lines;

constexpr const char* kTrainingProbe = TRAINING_PROBE_PATH;

// The line of stderr that mentions the variable: there must be one only.
std::string the_error_line(const RunResult& result) {
  std::string found;
  int count = 0;
  for (const std::string& line : split_lines(result.err)) {
    if (line.find("ACCELERATE_CPU_CAPABILITY") == std::string::npos) continue;
    found = line;
    ++count;
  }
  EXPECT_EQ(count, 1) << result.err;
  return found;
}

TEST(KernelCapabilityProcess, AnUnknownCapStopsTheProgramInOneLine) {
  RunResult result = run_program({kTrainingProbe}, {{"ACCELERATE_CPU_CAPABILITY", "avx9"}}, 60s);
  EXPECT_NE(result.exit_code, 0) << result.err;
  EXPECT_FALSE(result.timed_out);
  EXPECT_NE(the_error_line(result).find(
                "ACCELERATE_CPU_CAPABILITY expects one of default, avx2, avx512, got 'avx9'"),
            std::string::npos);
  EXPECT_EQ(result.out.find("trained"), std::string::npos) << "it must not train";
}

TEST(KernelCapabilityProcess, ThroughTheLauncherTheRanksErrorIsReported) {
  RunResult result = run_launcher({"launch", "--cpu", "--num_processes", "1", kTrainingProbe},
                                  {{"ACCELERATE_CPU_CAPABILITY", "AVX2"}}, 60s);
  EXPECT_NE(result.exit_code, 0) << result.err;
  EXPECT_FALSE(result.timed_out);
  EXPECT_NE(the_error_line(result).find("expects one of default, avx2, avx512, got 'AVX2'"),
            std::string::npos);
}

}  // namespace
}  // namespace accelerate::launcher
