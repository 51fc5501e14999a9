// An exception that escapes a training program (LibTorch's c10::Error from a
// failed backward, as a wrongly converted loop raises) ends the process with
// its first line and exit code 1, which the launcher reports as "rank N
// failed with exit code 1", instead of std::terminate's abort (signal 6, a
// core dump and a page of backtrace).
#include <torch/torch.h>

#include <gtest/gtest.h>

#include <thread>
#include <utility>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/common/errors.h"

namespace accelerate {
namespace {

class UncaughtErrors : public ::testing::Test {
 protected:
  // The child process runs the statement alone (the test binary has threads).
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// The exception escapes a thread's function, which ends the process as one
// escaping main() does: std::terminate runs with it current. (Not a
// noexcept function of this file: GCC may compile a throw it can see there
// as a plain call to std::terminate, with no exception at all.)
template <class Throw>
void escape(Throw&& throw_it) {
  std::thread(std::forward<Throw>(throw_it)).join();
}

void with_an_accelerator_escape_c10_error() {
  Accelerator accelerator(AcceleratorOptions().environment(Environment()).tune_malloc(false));
  escape([] {
    TORCH_CHECK(false, "one of the variables needed for gradient computation", "\nsecond line");
  });
}

void without_an_accelerator_escape_c10_error() {
  escape([] { TORCH_CHECK(false, "one of the variables needed for gradient computation"); });
}

TEST_F(UncaughtErrors, AnEscapingC10ErrorEndsTheProcessWithItsFirstLineAndExitCode1) {
  EXPECT_EXIT(with_an_accelerator_escape_c10_error(), ::testing::ExitedWithCode(1),
              "accelerate: error: one of the variables needed for gradient computation\n");
}

TEST_F(UncaughtErrors, AnEscapingErrorOfOursIsReportedTheSameWay) {
  EXPECT_EXIT(
      {
        Accelerator accelerator(AcceleratorOptions().environment(Environment()).tune_malloc(false));
        escape([] { throw Error("checkpoint /x is missing"); });
      },
      ::testing::ExitedWithCode(1), "accelerate: error: checkpoint /x is missing\n");
}

// The handler comes with the Accelerator: a program that builds none keeps
// the C++ runtime's abort, so the test above is not passing by accident.
TEST_F(UncaughtErrors, WithoutAnAcceleratorTheRuntimeAborts) {
  EXPECT_EXIT(without_an_accelerator_escape_c10_error(), ::testing::KilledBySignal(SIGABRT), "");
}

}  // namespace
}  // namespace accelerate
