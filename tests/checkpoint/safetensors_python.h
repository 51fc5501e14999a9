// Running tests/checkpoint/safetensors_interop.py (an independent Python
// reader/writer) and comparing its JSON descriptions with LibTorch tensors.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/process_runner.h"

namespace accelerate::safetensors::testing {

constexpr const char* kPython = "/usr/bin/python3";

inline bool have_python() { return ::access(kPython, X_OK) == 0; }

inline bool have_python_torch() {
  static const bool have =
      have_python() && accelerate::testing::run_program({kPython, "-c", "import torch, numpy"}, {},
                                                        std::chrono::seconds(60))
                               .exit_code == 0;
  return have;
}

// Runs the interop script; fails the test (and returns null) on a non-zero exit.
inline nlohmann::json run_interop(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kPython, SAFETENSORS_INTEROP_SCRIPT};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto result = accelerate::testing::run_program(argv, {}, std::chrono::seconds(120));
  EXPECT_EQ(result.exit_code, 0) << result.err;
  if (result.exit_code != 0 || result.out.empty()) return nullptr;
  return nlohmann::json::parse(result.out);
}

// Checks that `tensor` has exactly the dtype, shape and values of one
// tensor's description ({"dtype", "shape", "values"}).
inline void expect_same(const nlohmann::json& description, const at::Tensor& tensor,
                        const std::string& name) {
  SCOPED_TRACE("tensor " + name);
  static const std::map<std::string, at::ScalarType> kTypes = {
      {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16},
      {"I64", at::kLong},   {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},
      {"U8", at::kByte},    {"BOOL", at::kBool}};
  const std::string dtype = description.at("dtype");
  ASSERT_EQ(tensor.scalar_type(), kTypes.at(dtype));
  ASSERT_EQ(tensor.sizes().vec(), description.at("shape").get<std::vector<int64_t>>());
  const auto& values = description.at("values");
  ASSERT_EQ(static_cast<size_t>(tensor.numel()), values.size());
  const at::Tensor flat = tensor.contiguous().reshape({-1});
  if (tensor.is_floating_point()) {
    const at::Tensor as_double = flat.to(at::kDouble);
    for (size_t i = 0; i < values.size(); ++i) {
      const double expected = std::strtod(values[i].get<std::string>().c_str(), nullptr);
      const double actual = as_double[i].item<double>();
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(actual)) << "element " << i;
      } else {
        EXPECT_EQ(actual, expected) << "element " << i;
        EXPECT_EQ(std::signbit(actual), std::signbit(expected)) << "element " << i;
      }
    }
  } else {
    const at::Tensor as_long = flat.to(at::kLong);
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(as_long[i].item<int64_t>(), values[i].get<int64_t>()) << "element " << i;
    }
  }
}

// A tensor built from a description, for feeding Python's inputs to C++.
inline at::Tensor tensor_from(const nlohmann::json& description) {
  std::vector<double> values;
  for (const auto& v : description.at("values"))
    values.push_back(std::strtod(v.get<std::string>().c_str(), nullptr));
  return torch::tensor(values, torch::kDouble)
      .to(torch::kFloat)
      .reshape(description.at("shape").get<std::vector<int64_t>>());
}

}  // namespace accelerate::safetensors::testing
