// parse_strict_json: duplicate keys with their dotted path, the nesting
// limit, and syntax errors with their line and column. Torch-free.
#include <gtest/gtest.h>

#include <string>

#include "common/strict_json.h"

namespace accelerate {
namespace {

using Kind = StrictJsonProblem::Kind;

// The problem parse_strict_json reports, or one whose message says it parsed.
StrictJsonProblem problem_of(const std::string& text, int max_depth = 32) {
  StrictJsonProblem problem;
  if (parse_strict_json(text, StrictJsonLimits{max_depth}, &problem)) {
    problem.message = "(parsed)";
  }
  return problem;
}

TEST(StrictJson, ParsesValidJson) {
  StrictJsonProblem problem;
  const auto parsed = parse_strict_json(R"({"a": {"b": [1, 2]}, "c": "d"})", {}, &problem);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ((*parsed)["a"]["b"][1], 2);
  EXPECT_EQ((*parsed)["c"], "d");
  EXPECT_TRUE(parse_strict_json("[]", {}, nullptr).has_value());
}

TEST(StrictJson, DuplicateTopLevelKey) {
  const auto problem = problem_of(R"({"a": 1, "b": 2, "a": 3})");
  EXPECT_EQ(problem.kind, Kind::kDuplicateKey);
  EXPECT_EQ(problem.key_path, "a");
  EXPECT_EQ(problem.message, "duplicate key 'a'");
}

TEST(StrictJson, DuplicateNestedKeyNamesItsPath) {
  const auto problem = problem_of(R"({"x": 1, "zero": {"offload": {"device": 1, "device": 2}}})");
  EXPECT_EQ(problem.kind, Kind::kDuplicateKey);
  EXPECT_EQ(problem.key_path, "zero.offload.device");
  EXPECT_EQ(problem.message, "duplicate key 'zero.offload.device'");
  // Array elements add nothing to the path.
  EXPECT_EQ(problem_of(R"({"list": [1, {"k": 1, "k": 2}]})").message, "duplicate key 'list.k'");
}

TEST(StrictJson, SameKeyInDifferentObjectsIsFine) {
  EXPECT_EQ(problem_of(R"({"fp16": {"enabled": true}, "bf16": {"enabled": false}})").message,
            "(parsed)");
  EXPECT_EQ(problem_of(R"({"a": {"a": {"a": 1}}})").message, "(parsed)");
  // A key seen before an inner object is still remembered after it.
  EXPECT_EQ(problem_of(R"({"a": 1, "b": {"a": 2}, "a": 3})").message, "duplicate key 'a'");
}

TEST(StrictJson, ArraysOfObjectsMayRepeatKeysAcrossElements) {
  EXPECT_EQ(problem_of(R"([{"name": "w", "size": 1}, {"name": "b", "size": 2}])").message,
            "(parsed)");
  EXPECT_EQ(problem_of(R"({"groups": [{"lr": 1}, {"lr": 2}], "lr": 3})").message, "(parsed)");
}

TEST(StrictJson, DepthLimit) {
  // nlohmann's depth: a value inside N arrays is at depth N.
  EXPECT_EQ(problem_of("[[[[1]]]]", 4).message, "(parsed)");
  const auto problem = problem_of("[[[[[1]]]]]", 4);
  EXPECT_EQ(problem.kind, Kind::kTooDeep);
  EXPECT_EQ(problem.message, "JSON nested deeper than 4 levels");
  EXPECT_EQ(problem_of(std::string(100, '[') + std::string(100, ']')).message,
            "JSON nested deeper than 32 levels");
  EXPECT_EQ(problem_of(R"({"a": {"b": {"c": 1}}})", 2).kind, Kind::kTooDeep);
  EXPECT_EQ(problem_of(R"({"a": {"b": {"c": 1}}})", 3).message, "(parsed)");
}

TEST(StrictJson, SyntaxErrorsNameLineAndColumn) {
  const auto problem = problem_of("{\n  \"a\": {\"b\": 2},\n  \"c\" {}\n}");
  EXPECT_EQ(problem.kind, Kind::kSyntax);
  EXPECT_EQ(problem.location, "line 3, column 7");
  EXPECT_EQ(problem.description,
            "syntax error while parsing object separator - unexpected '{'; expected ':'");
  EXPECT_EQ(problem.message,
            "line 3, column 7: syntax error while parsing object separator - unexpected '{'; "
            "expected ':'");
  EXPECT_EQ(problem_of("").location, "line 1, column 1");
  EXPECT_EQ(problem_of(R"({"a": NaN})").location, "line 1, column 7");
  // The description stays on one line.
  EXPECT_EQ(problem_of("{\"a\n\": 1}").message.find('\n'), std::string::npos);
}

TEST(StrictJson, NumberTooLargeHasNoPosition) {
  const auto problem = problem_of(R"({"a": 1e500})");
  EXPECT_EQ(problem.kind, Kind::kSyntax);
  EXPECT_EQ(problem.location, "");
  EXPECT_EQ(problem.description, "number overflow parsing '1e500'");
  EXPECT_EQ(problem.message, problem.description);
}

}  // namespace
}  // namespace accelerate
