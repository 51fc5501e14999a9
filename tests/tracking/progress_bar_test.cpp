// ProgressBar: the exact line format, and when it draws at all.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <sstream>
#include <vector>

#include "accelerate/tracking/progress_bar.h"
#include "tracking/progress_format.h"

namespace accelerate {
namespace {

using tracking::format_duration;
using tracking::format_progress;
using tracking::ProgressSnapshot;

TEST(ProgressFormat, BarWithRateEtaAndPostfixFillsTheWidth) {
  ProgressSnapshot s;
  s.desc = "epoch 1";
  s.n = 450;
  s.total = 1000;
  s.elapsed_secs = 12.43;
  s.postfix = {{"loss", 0.123456}};
  s.width = 100;
  EXPECT_EQ(format_progress(s),
            "epoch 1:  45%|#################                     | 450/1000 "
            "[00:12<00:15, 36.20it/s, loss=0.1235]");
  EXPECT_EQ(format_progress(s).size(), 100u);
}

TEST(ProgressFormat, WithoutATotalItCounts) {
  ProgressSnapshot s;
  s.desc = "train";
  s.unit = "batch";
  s.n = 7;
  s.elapsed_secs = 2;
  s.postfix = {{"loss", 2.5}, {"epoch", 3}, {"phase", "warmup"}};
  EXPECT_EQ(format_progress(s),
            "train: 7batch [00:02, 3.50batch/s, loss=2.5, epoch=3, phase=warmup]");
}

TEST(ProgressFormat, SlowLoopsShowSecondsPerIterationAndUnknownRatesAQuestionMark) {
  ProgressSnapshot s;
  s.n = 1;
  s.total = 4;
  s.elapsed_secs = 4;
  s.width = 40;
  EXPECT_EQ(format_progress(s), " 25%|#     | 1/4 [00:04<00:12, 4.00s/it]");
  s.n = 0;
  s.elapsed_secs = 0;
  EXPECT_EQ(format_progress(s), "  0%|" + std::string(13, ' ') + "| 0/4 [00:00<?, ?it/s]");
}

TEST(ProgressFormat, Durations) {
  EXPECT_EQ(format_duration(0), "00:00");
  EXPECT_EQ(format_duration(65.9), "01:05");
  EXPECT_EQ(format_duration(3723), "1:02:03");
}

ProgressBarOptions to(std::ostream& out) {
  return ProgressBarOptions()
      .stream(&out)
      .terminal(true)
      .local_main_process(true)
      .ncols(60)
      .min_interval_secs(0);
}

TEST(ProgressBar, DrawsOnATerminalAndEndsWithANewline) {
  std::ostringstream out;
  {
    ProgressBar bar(to(out).total(3).desc("eval"));
    EXPECT_TRUE(bar.shown());
    for (int i = 0; i < 3; ++i) {
      bar.set_postfix({{"loss", 0.5}});
      bar.update();
    }
  }
  const std::string text = out.str();
  EXPECT_EQ(text.front(), '\r');
  EXPECT_EQ(text.back(), '\n');
  EXPECT_NE(text.find("eval: 100%|"), std::string::npos) << text;
  EXPECT_NE(text.find("| 3/3 ["), std::string::npos) << text;
  EXPECT_NE(text.find("loss=0.5]"), std::string::npos) << text;
  // Every drawn line fits in ncols - 1 columns.
  for (size_t start = 0, end; (end = text.find_first_of("\r\n", start + 1)) != std::string::npos;
       start = end) {
    EXPECT_LE(end - start - 1, 59u);
  }
}

TEST(ProgressBar, IsQuietWhenNotATerminal) {
  std::ostringstream out;
  {
    ProgressBar bar(to(out).terminal(false).total(3));
    bar.update(3);
    EXPECT_FALSE(bar.shown());
    EXPECT_EQ(bar.n(), 3);
  }
  EXPECT_EQ(out.str(), "");
}

TEST(ProgressBar, IsQuietOffTheLocalMainProcessOrWhenDisabled) {
  std::ostringstream out;
  {
    ProgressBar other_rank(to(out).local_main_process(false).total(3));
    other_rank.update();
    ProgressBar disabled(to(out).disable(true).total(3));
    disabled.update();
  }
  EXPECT_EQ(out.str(), "");
}

TEST(ProgressBar, LeaveFalseErasesTheLine) {
  std::ostringstream out;
  {
    ProgressBar bar(to(out).total(2).leave(false));
    bar.update(2);
  }
  const std::string text = out.str();
  EXPECT_EQ(text.back(), '\r');
  EXPECT_EQ(text.find('\n'), std::string::npos);
}

TEST(ProgressBar, RedrawsAreThrottled) {
  std::ostringstream out;
  {
    ProgressBar bar(to(out).total(100000).min_interval_secs(3600));
    for (int i = 0; i < 1000; ++i) bar.update();
  }
  // The first draw, the final draw at close, nothing in between.
  size_t draws = 0;
  for (char c : out.str()) draws += c == '\r';
  EXPECT_EQ(draws, 2u);
}

TEST(ProgressBar, WrapsARangeTakingItsSizeAsTotal) {
  std::ostringstream out;
  std::vector<int> items = {1, 2, 3, 4};
  int sum = 0;
  {
    auto range = progress(items, to(out).desc("sum"));
    for (int& item : range) {
      sum += item;
      range.bar().set_postfix({{"sum", sum}});
    }
    EXPECT_EQ(range.bar().n(), 4);
  }
  EXPECT_EQ(sum, 10);
  EXPECT_NE(out.str().find("sum: 100%|"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("| 4/4 ["), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("sum=10]"), std::string::npos) << out.str();
}

// A range with a move-only iterator and known_size(), like DataLoader.
struct Countdown {
  struct It {
    int left;
    std::unique_ptr<int> move_only = std::make_unique<int>(0);
    int operator*() const { return left; }
    It& operator++() {
      --left;
      return *this;
    }
    bool operator!=(const It& other) const { return left != other.left; }
  };
  It begin() { return It{3}; }
  It end() { return It{0}; }
  std::optional<size_t> known_size() const { return 3; }
};

TEST(ProgressBar, WrapsMoveOnlyIteratorsAndKnownSize) {
  std::ostringstream out;
  Countdown countdown;
  std::vector<int> seen;
  for (int value : progress(countdown, to(out))) seen.push_back(value);
  EXPECT_EQ(seen, (std::vector<int>{3, 2, 1}));
  EXPECT_NE(out.str().find("| 3/3 ["), std::string::npos) << out.str();
}

}  // namespace
}  // namespace accelerate

namespace accelerate {
namespace {

// The terminal width comes from the options' environment (COLUMNS), not
// from the process's.
TEST(ProgressBar, ColumnsComeFromTheOptionsEnvironment) {
  std::ostringstream out;
  {
    ProgressBar bar(ProgressBarOptions()
                        .stream(&out)
                        .terminal(true)
                        .local_main_process(true)
                        .min_interval_secs(0)
                        .environment(Environment{{"COLUMNS", "30"}})
                        .total(3));
    bar.update(3);
  }
  const std::string text = out.str();
  ASSERT_FALSE(text.empty());
  for (size_t start = 0, end; (end = text.find_first_of("\r\n", start + 1)) != std::string::npos;
       start = end) {
    EXPECT_LE(end - start - 1, 29u) << text;
  }
}

}  // namespace
}  // namespace accelerate
