// tune_malloc_for_training and AcceleratorOptions::tune_malloc. mallopt is
// process-wide, so each check that changes it runs in a fresh process (a
// gtest death test in "threadsafe" style re-executes this binary).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/common/malloc_tuning.h"

namespace accelerate {
namespace {

#if defined(__GLIBC__)

// Below the tuned mmap threshold, far above glibc's default (128 KiB) and
// above anything LibTorch's start-up frees (which would raise the adaptive
// threshold).
constexpr std::size_t kBlock = 16u << 20;
// Above the largest mmap threshold glibc takes (32 MiB).
constexpr std::size_t kHugeBlock = 96u << 20;

enum Outcome { kFromHeapAndKept = 3, kMmapped = 4, kOther = 5 };

// Where the block lives while allocated: a store the compiler cannot prove
// dead, so it cannot drop the malloc/free pair.
char* volatile escaped_block = nullptr;

// Allocates and frees one big block and tells where it came from: the heap
// (and still there after free: not trimmed), or its own mapping.
Outcome big_block_outcome(std::size_t bytes = kBlock) {
  const struct mallinfo2 before = mallinfo2();
  escaped_block = static_cast<char*>(std::malloc(bytes));
  std::memset(escaped_block, 1, bytes);
  const struct mallinfo2 allocated = mallinfo2();
  std::free(escaped_block);
  const struct mallinfo2 freed = mallinfo2();
  if (allocated.hblks == before.hblks + 1) return kMmapped;
  const bool heap_grew = allocated.arena >= before.arena + bytes - (1u << 20);
  if (allocated.hblks == before.hblks && heap_grew && freed.arena == allocated.arena) {
    return kFromHeapAndKept;
  }
  return kOther;
}

[[noreturn]] void exit_with(Outcome outcome) { std::_Exit(outcome); }

// Tunes with `env`, then reports where a block of `bytes` comes from.
[[noreturn]] void tune_and_exit_with_outcome(const Environment& env, std::size_t bytes = kBlock) {
  if (tune_malloc_for_training(env) != MallocTuningResult::kApplied) exit_with(kOther);
  exit_with(big_block_outcome(bytes));
}

class MallocTuningTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(MallocTuningTest, UntunedGlibcMapsABigBlockOfItsOwn) {
  // The control: without tuning the block below is mmapped, so the tests
  // that expect it on the heap can fail.
  EXPECT_EXIT(exit_with(big_block_outcome()), ::testing::ExitedWithCode(kMmapped), "");
}

TEST_F(MallocTuningTest, TunedGlibcServesBigBlocksFromTheHeapAndKeepsThem) {
  EXPECT_EXIT(tune_and_exit_with_outcome(Environment()),
              ::testing::ExitedWithCode(kFromHeapAndKept), "");
}

TEST_F(MallocTuningTest, TunedGlibcMapsNoBlockEvenAboveTheLargestThreshold) {
  EXPECT_EXIT(exit_with(big_block_outcome(kHugeBlock)), ::testing::ExitedWithCode(kMmapped), "");
  EXPECT_EXIT(tune_and_exit_with_outcome(Environment(), kHugeBlock),
              ::testing::ExitedWithCode(kFromHeapAndKept), "");
}

TEST_F(MallocTuningTest, UnrelatedTunablesDoNotStopTheTuning) {
  const Environment unrelated{{"GLIBC_TUNABLES", "glibc.pthread.rseq=0"}};
  EXPECT_EXIT(tune_and_exit_with_outcome(unrelated), ::testing::ExitedWithCode(kFromHeapAndKept),
              "");
}

TEST_F(MallocTuningTest, ThresholdsChosenInTheEnvironmentAreLeftAlone) {
  // Returns before any mallopt, so it may run in this process.
  for (const Environment& env :
       {Environment{{"GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0"}},
        Environment{{"GLIBC_TUNABLES", "glibc.pthread.rseq=0:glibc.malloc.mmap_threshold=4096"}},
        Environment{{"GLIBC_TUNABLES", "glibc.malloc.mmap_max=4"}},
        Environment{{"MALLOC_MMAP_THRESHOLD_", "131072"}},
        Environment{{"MALLOC_TRIM_THRESHOLD_", "0"}}, Environment{{"MALLOC_MMAP_MAX_", "8"}}}) {
    EXPECT_EQ(tune_malloc_for_training(env), MallocTuningResult::kLeftToEnvironment)
        << env.begin()->first << "=" << env.begin()->second;
  }
  EXPECT_STREQ(to_string(MallocTuningResult::kLeftToEnvironment), "left to the environment");
}

TEST_F(MallocTuningTest, AcceleratorTunesMallocByDefault) {
  EXPECT_EXIT(
      {
        Accelerator accelerator(AcceleratorOptions().cpu(true));
        exit_with(big_block_outcome());
      },
      ::testing::ExitedWithCode(kFromHeapAndKept), "");
}

TEST_F(MallocTuningTest, AcceleratorLeavesMallocAloneWhenAskedTo) {
  EXPECT_EXIT(
      {
        Accelerator accelerator(AcceleratorOptions().cpu(true).tune_malloc(false));
        exit_with(big_block_outcome());
      },
      ::testing::ExitedWithCode(kMmapped), "");
}

#else
TEST(MallocTuningTest, NotGlibcNothingToTune) {
  EXPECT_EQ(tune_malloc_for_training(Environment{}), MallocTuningResult::kUnsupported);
}
#endif

}  // namespace
}  // namespace accelerate
