#include <torch/torch.h>

#include <gtest/gtest.h>

#include "accelerate/distributed/object_serializer.h"

namespace {

TEST(Serializer, RoundTripsNestedValues) {
  std::map<std::string, std::vector<std::pair<int, double>>> value{{"a", {{1, 0.5}, {2, -3.25}}},
                                                                   {"b", {}}};
  auto bytes = accelerate::serialize(value);
  EXPECT_EQ(accelerate::deserialize<decltype(value)>(bytes), value);
  std::optional<std::string> none;
  EXPECT_EQ(accelerate::deserialize<std::optional<std::string>>(accelerate::serialize(none)), none);
  std::vector<bool> flags{true, false, true};
  EXPECT_EQ(accelerate::deserialize<std::vector<bool>>(accelerate::serialize(flags)), flags);
}

TEST(Serializer, RoundTripsTensors) {
  auto t = torch::arange(12, torch::kFloat).reshape({3, 4}).t();
  auto back = accelerate::deserialize<at::Tensor>(accelerate::serialize(at::Tensor(t)));
  EXPECT_TRUE(torch::equal(back, t));
  auto b = torch::ones({2}, torch::kBFloat16);
  EXPECT_TRUE(
      torch::equal(accelerate::deserialize<at::Tensor>(accelerate::serialize(at::Tensor(b))), b));
}

TEST(Serializer, TruncatedOrMismatchedBytesAreErrorsNotCrashes) {
  auto bytes = accelerate::serialize(std::string("hello world"));
  EXPECT_THROW(accelerate::deserialize<std::string>(bytes.substr(0, 5)), accelerate::Error);
  EXPECT_THROW(accelerate::deserialize<int>(bytes), accelerate::Error);  // trailing data
  std::string huge_length(8, '\xff');
  EXPECT_THROW(accelerate::deserialize<std::string>(huge_length), accelerate::Error);
}

}  // namespace
