// safetensors with LibTorch tensors: round trips of every dtype, strided
// tensors, exact bytes on disk, errors, random damage, and interop with an
// independent Python reader/writer.
#include "accelerate/checkpoint/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <iostream>

#include "accelerate/common/errors.h"
#include "checkpoint/safetensors_mutation.h"
#include "checkpoint/safetensors_python.h"
#include "checkpoint/safetensors_test_files.h"

namespace accelerate {
namespace {

using safetensors::testing::file_bytes;
using safetensors::testing::read_bytes;
using safetensors::testing::TempDir;
using safetensors::testing::write_bytes;
using ::testing::HasSubstr;

NamedTensors every_dtype() {
  torch::manual_seed(7);
  return {{"f64", torch::randn({3, 2}, torch::kDouble)},
          {"f32", torch::randn({4})},
          {"f16", torch::randn({2, 3}).to(torch::kHalf)},
          {"bf16", torch::randn({5}).to(torch::kBFloat16)},
          {"i64", torch::randint(-1000000, 1000000, {3}, torch::kLong)},
          {"i32", torch::randint(-100000, 100000, {2, 2}, torch::kInt)},
          {"i16", torch::randint(-30000, 30000, {3}, torch::kShort)},
          {"i8", torch::randint(-128, 127, {7}, torch::kChar)},
          {"u8", torch::randint(0, 255, {1, 1, 3}, torch::kByte)},
          {"bool", torch::randint(0, 2, {5}).to(torch::kBool)},
          {"scalar", torch::tensor(3.5)},
          {"empty", torch::zeros({0, 4})}};
}

void expect_equal(const NamedTensors& expected, const NamedTensors& actual) {
  ASSERT_EQ(expected.size(), actual.size());
  std::map<std::string, at::Tensor> by_name(actual.begin(), actual.end());
  for (const auto& [name, tensor] : expected) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(by_name.count(name));
    const at::Tensor& got = by_name.at(name);
    EXPECT_EQ(got.scalar_type(), tensor.scalar_type());
    EXPECT_EQ(got.sizes(), tensor.sizes());
    EXPECT_TRUE(torch::equal(got, tensor));
  }
}

TEST(Safetensors, RoundTripsEveryDtypeExactly) {
  TempDir dir;
  const auto tensors = every_dtype();
  save_safetensors(dir.file("a.safetensors"), tensors, {{"format", "pt"}, {"note", "ünïcode"}});
  SafetensorsMetadata metadata;
  const auto loaded = load_safetensors(dir.file("a.safetensors"), &metadata);
  expect_equal(tensors, loaded);
  EXPECT_EQ(metadata, (SafetensorsMetadata{{"format", "pt"}, {"note", "ünïcode"}}));
  // No temporary file is left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

TEST(Safetensors, StridedAndExpandedTensorsAreWrittenByValue) {
  TempDir dir;
  const auto base = torch::arange(24, torch::kFloat).reshape({4, 6});
  const NamedTensors tensors = {
      {"transposed", base.t()},
      {"stepped", base.slice(1, 1, 6, 2)},
      {"offset_row", base[2]},
      {"expanded", torch::tensor({1.0, 2.0}).expand({3, 2})},
      {"channels_last", torch::randn({2, 3, 4, 5}).contiguous(at::MemoryFormat::ChannelsLast)}};
  save_safetensors(dir.file("s.safetensors"), tensors);
  expect_equal(tensors, load_safetensors(dir.file("s.safetensors")));
}

TEST(Safetensors, BytesOnDiskFollowTheFormat) {
  TempDir dir;
  save_safetensors(dir.file("b.safetensors"), {{"h", torch::tensor({1.0}, torch::kHalf)},
                                               {"x", torch::tensor({1.0f, -2.0f})}});
  const std::string bytes = read_bytes(dir.file("b.safetensors"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u) << "header padded to 8 bytes";
  const std::string header = bytes.substr(8, n);
  // Largest element size first: x (F32) at 0, then h (F16).
  EXPECT_THAT(header, HasSubstr(R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})"));
  EXPECT_THAT(header, HasSubstr(R"("h":{"dtype":"F16","shape":[1],"data_offsets":[8,10]})"));
  EXPECT_EQ(header.find_last_not_of(' ') + 1, header.find('}', header.rfind('}')) + 1);
  // 1.0f = 0x3f800000, -2.0f = 0xc0000000, 1.0 half = 0x3c00, little-endian.
  EXPECT_EQ(bytes.substr(8 + n), std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0\x00\x3c", 10));
}

TEST(Safetensors, WriterRefusesBadInputAndLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  auto error_of = [&](const NamedTensors& tensors) -> std::string {
    try {
      save_safetensors(path, tensors);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_THAT(error_of({{"a", torch::ones(1)}, {"a", torch::ones(1)}}),
              HasSubstr("'a' appears twice"));
  EXPECT_THAT(error_of({{"", torch::ones(1)}}), HasSubstr("empty name"));
  EXPECT_THAT(error_of({{"__metadata__", torch::ones(1)}}), HasSubstr("reserved"));
  EXPECT_THAT(error_of({{"u", at::Tensor()}}), HasSubstr("'u' is undefined"));
  EXPECT_THAT(error_of({{"c", torch::ones(2, torch::kComplexFloat)}}),
              HasSubstr("'c' has dtype ComplexFloat"));
  EXPECT_THAT(error_of({{std::string("bad\xff"), torch::ones(1)}}), HasSubstr("not valid UTF-8"));
  EXPECT_THAT(error_of({{"a", torch::ones(1)}}), HasSubstr("(no error)"));
  EXPECT_THROW(save_safetensors(dir.file("missing/dir/x.safetensors"), {{"a", torch::ones(1)}}),
               Error);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

TEST(Safetensors, ReaderByNameAndIntoExistingTensors) {
  TempDir dir;
  const std::string path = dir.file("r.safetensors");
  save_safetensors(
      path, {{"w", torch::arange(6, torch::kFloat).reshape({2, 3})}, {"n", torch::tensor({5L})}});
  const SafetensorsReader reader(path);
  EXPECT_EQ(reader.names(), (std::vector<std::string>{"n", "w"})) << "8-byte elements first";
  EXPECT_EQ(reader.dtype("n"), at::kLong);
  EXPECT_EQ(reader.shape("w"), (std::vector<int64_t>{2, 3}));
  EXPECT_THAT([&] { reader.read("nope"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("tensor 'nope': not in the file")));

  // Into a parameter: values land, no autograd history, version bumped.
  auto parameter = torch::zeros({2, 3}).requires_grad_(true);
  const auto version = parameter._version();
  reader.read_into("w", parameter);
  EXPECT_TRUE(torch::equal(parameter.detach(), torch::arange(6, torch::kFloat).reshape({2, 3})));
  EXPECT_TRUE(parameter.is_leaf());
  EXPECT_FALSE(parameter.grad_fn());
  EXPECT_GT(parameter._version(), version);

  // A non-contiguous destination takes the staging path.
  auto wide = torch::zeros({3, 2});
  auto transposed = wide.t();
  reader.read_into("w", transposed);
  EXPECT_TRUE(torch::equal(wide, torch::arange(6, torch::kFloat).reshape({2, 3}).t()));

  EXPECT_THAT(
      reader.mismatch("w", torch::zeros({3, 2})),
      HasSubstr("'" + path +
                "': tensor 'w': is F32 [2, 3] in the file but the destination is F32 [3, 2]"));
  EXPECT_THAT(reader.mismatch("w", torch::zeros({2, 3}, torch::kDouble)),
              HasSubstr("destination is F64 [2, 3]"));
  EXPECT_THROW(reader.read_into("w", torch::zeros({6})), Error);
}

TEST(Safetensors, DtypesLibTorchLacksAndBadBoolBytes) {
  TempDir dir;
  write_bytes(dir.file("u.safetensors"),
              file_bytes(R"({"u":{"dtype":"U16","shape":[1],"data_offsets":[0,2]},)"
                         R"("b":{"dtype":"BOOL","shape":[2],"data_offsets":[2,4]}})",
                         std::string("\1\0\1\2", 4)));
  const SafetensorsReader reader(dir.file("u.safetensors"));
  EXPECT_THAT([&] { reader.read("u"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("tensor 'u': dtype U16 has no LibTorch")));
  EXPECT_THAT([&] { reader.read("b"); },
              ::testing::ThrowsMessage<Error>(
                  HasSubstr("tensor 'b': BOOL data holds bytes other than 0 and 1")));
}

// Whole-file reads of thousands of damaged files: only accelerate::Error.
TEST(Safetensors, RandomMutationsOfWholeFilesOnlyThrowError) {
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  save_safetensors(good,
                   {{"layer.weight", torch::randn({3, 4})},
                    {"layer.bias", torch::randn({3}).to(torch::kBFloat16)},
                    {"flags", torch::ones({4}, torch::kBool)},
                    {"steps", torch::tensor({3L})}},
                   {{"format", "pt"}});
  const std::string path = dir.file("m.safetensors");
  const auto stats = safetensors::testing::run_mutations(
      read_bytes(good), 0xacce1, std::chrono::seconds(3), 2000, 50000,
      [&](const std::string& bytes) {
        write_bytes(path, bytes);
        for (const auto& [name, tensor] : load_safetensors(path))
          ASSERT_TRUE(tensor.defined()) << name;
      });
  std::cout << "mutations: " << stats.tried << " tried, " << stats.accepted << " accepted, "
            << stats.refused << " refused (" << stats.refused_naming_tensor
            << " naming a tensor)\n";
  EXPECT_GT(stats.refused_naming_tensor, stats.tried / 40);
  EXPECT_GT(stats.refused, stats.tried / 4);
  EXPECT_EQ(stats.other_exceptions, 0u) << stats.first_other;
}

TEST(SafetensorsInterop, PythonReadsOurFilesExactly) {
  if (!safetensors::testing::have_python()) GTEST_SKIP() << "/usr/bin/python3 not found";
  TempDir dir;
  auto tensors = every_dtype();
  tensors.emplace_back("special", torch::tensor({0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-45f}));
  tensors.emplace_back("strided", torch::arange(12, torch::kDouble).reshape({3, 4}).t());
  save_safetensors(dir.file("c.safetensors"), tensors, {{"format", "pt"}});
  const auto description = safetensors::testing::run_interop({"read", dir.file("c.safetensors")});
  ASSERT_FALSE(description.is_null());
  EXPECT_EQ(description["metadata"], nlohmann::json({{"format", "pt"}}));
  EXPECT_EQ(description["header_length"].get<uint64_t>() % 8, 0u);
  ASSERT_EQ(description["tensors"].size(), tensors.size());
  std::map<std::string, at::Tensor> by_name(tensors.begin(), tensors.end());
  for (const auto& entry : description["tensors"]) {
    const std::string name = entry["name"];
    ASSERT_TRUE(by_name.count(name)) << name;
    safetensors::testing::expect_same(entry, by_name.at(name), name);
  }
}

TEST(SafetensorsInterop, WeReadPythonFilesExactly) {
  if (!safetensors::testing::have_python()) GTEST_SKIP() << "/usr/bin/python3 not found";
  TempDir dir;
  const auto description = safetensors::testing::run_interop({"write", dir.file("p.safetensors")});
  ASSERT_FALSE(description.is_null());
  EXPECT_NE(description["header_length"].get<uint64_t>() % 8, 0u)
      << "the Python file is deliberately unpadded";
  SafetensorsMetadata metadata;
  const auto loaded = load_safetensors(dir.file("p.safetensors"), &metadata);
  EXPECT_EQ(metadata.at("origin"), "python");
  ASSERT_EQ(loaded.size(), description["tensors"].size());
  for (size_t i = 0; i < loaded.size(); ++i) {
    EXPECT_EQ(loaded[i].first, description["tensors"][i]["name"]) << "file order";
    safetensors::testing::expect_same(description["tensors"][i], loaded[i].second, loaded[i].first);
  }
}

}  // namespace
}  // namespace accelerate
