// TrackerValue conversions and the JSON/CSV encodings the file trackers use.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "accelerate/common/errors.h"
#include "accelerate/tracking/tracker_value.h"
#include "tracking/text_format.h"

namespace accelerate {
namespace tracking {
namespace {

TEST(TrackerValue, ConvertsFromEveryArithmeticTypeAndStrings) {
  EXPECT_TRUE(TrackerValue(3).is_int());
  EXPECT_TRUE(TrackerValue(std::int64_t{3}).is_int());
  EXPECT_TRUE(TrackerValue(3u).is_int());
  EXPECT_TRUE(TrackerValue(0.5f).is_double());
  EXPECT_TRUE(TrackerValue(true).is_bool());
  EXPECT_TRUE(TrackerValue("adamw").is_string());
  EXPECT_EQ(TrackerValue(true).to_double(), 1.0);
  EXPECT_EQ(TrackerValue(7).to_double(), 7.0);
  EXPECT_THROW(TrackerValue("x").to_double(), Error);
  EXPECT_THROW(TrackerValue(1).string(), Error);
}

TEST(TrackerValue, ToStringIsShortestExact) {
  EXPECT_EQ(TrackerValue(0.1).to_string(), "0.1");
  EXPECT_EQ(TrackerValue(1e-5).to_string(), "1e-05");
  EXPECT_EQ(TrackerValue(1.0 / 3).to_string(), "0.3333333333333333");
  EXPECT_EQ(TrackerValue(2.0).to_string(), "2");
  EXPECT_EQ(TrackerValue(-42).to_string(), "-42");
  EXPECT_EQ(TrackerValue(false).to_string(), "false");
  EXPECT_EQ(std::stod(TrackerValue(1.0 / 3).to_string()), 1.0 / 3);
}

TEST(TextFormat, JsonEscapesAndHasNoNaN) {
  EXPECT_EQ(json_string("a\"b\\c\nd\te\x01"), "\"a\\\"b\\\\c\\nd\\te\\u0001\"");
  EXPECT_EQ(json_value(std::numeric_limits<double>::quiet_NaN()), "null");
  EXPECT_EQ(json_value(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(json_value(true), "true");
  EXPECT_EQ(json_object({{"lr", 0.001}, {"name", "run 1"}, {"steps", 10}}),
            "{\"lr\":0.001,\"name\":\"run 1\",\"steps\":10}");
}

TEST(TextFormat, CsvQuotesOnlyWhenNeeded) {
  EXPECT_EQ(csv_field("loss"), "loss");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_field("two\nlines"), "\"two\nlines\"");
}

}  // namespace
}  // namespace tracking
}  // namespace accelerate
