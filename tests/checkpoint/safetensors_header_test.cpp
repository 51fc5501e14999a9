// The torch-free safetensors header parser: valid headers, and a clear
// one-line accelerate::Error for every kind of bad file.
#include "checkpoint/safetensors_header.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <iostream>

#include "accelerate/common/errors.h"
#include "checkpoint/safetensors_mutation.h"
#include "checkpoint/safetensors_test_files.h"

namespace accelerate::safetensors {
namespace {

using testing::file_bytes;
using ::testing::HasSubstr;
using testing::TempDir;
using testing::write_bytes;

// The message parse_header throws for `header` over `data_size` bytes.
std::string error_of(const std::string& header, uint64_t data_size = 0) {
  try {
    parse_header(header, data_size, "x.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string read_error(const std::string& path) {
  try {
    read_header(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SafetensorsHeader, ParsesTensorsInDataOrderAndMetadata) {
  TempDir dir;
  const std::string header = R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[2,10]},)"
                             R"("__metadata__":{"format":"pt"},)"
                             R"("a":{"dtype":"BF16","shape":[],"data_offsets":[0,2]},)"
                             R"("e":{"dtype":"I64","shape":[0,3],"data_offsets":[10,10]}})";
  write_bytes(dir.file("m.safetensors"), file_bytes(header + "   ", std::string(10, '\1')));
  const Header h = read_header(dir.file("m.safetensors"));
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.tensors[0].name, "a");
  EXPECT_EQ(h.tensors[0].dtype, "BF16");
  EXPECT_TRUE(h.tensors[0].shape.empty());
  EXPECT_EQ(h.tensors[1].name, "b");
  EXPECT_EQ(h.tensors[1].shape, std::vector<int64_t>{2});
  EXPECT_EQ(h.tensors[1].begin, 2u);
  EXPECT_EQ(h.tensors[1].end, 10u);
  EXPECT_EQ(h.tensors[2].name, "e");
  EXPECT_EQ(h.tensors[2].shape, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.data_offset, 8 + header.size() + 3);
  EXPECT_EQ(h.file_size, h.data_offset + 10);
}

TEST(SafetensorsHeader, EmptyHeaderIsAValidEmptyFile) {
  EXPECT_TRUE(parse_header("{}", 0, "x").tensors.empty());
  EXPECT_THAT(error_of("{}", 4), HasSubstr("tensors cover 0 bytes but the data section has 4"));
}

TEST(SafetensorsHeader, DtypeSizes) {
  EXPECT_EQ(dtype_size("F64"), 8u);
  EXPECT_EQ(dtype_size("F32"), 4u);
  EXPECT_EQ(dtype_size("BF16"), 2u);
  EXPECT_EQ(dtype_size("F16"), 2u);
  EXPECT_EQ(dtype_size("I8"), 1u);
  EXPECT_EQ(dtype_size("BOOL"), 1u);
  EXPECT_EQ(dtype_size("f32"), 0u);
  EXPECT_EQ(dtype_size(""), 0u);
}

TEST(SafetensorsHeader, MalformedJsonNamesTheFile) {
  EXPECT_THAT(error_of(R"({"a": )"),
              HasSubstr("safetensors file 'x.safetensors': header is not valid JSON"));
  EXPECT_THAT(error_of("[1,2]"), HasSubstr("header is not a JSON object"));
  EXPECT_THAT(error_of(""), HasSubstr("not valid JSON"));
  EXPECT_THAT(error_of(std::string(100, '[') + std::string(100, ']')), HasSubstr("nested deeper"));
}

TEST(SafetensorsHeader, DuplicateNamesAreRefused) {
  EXPECT_THAT(error_of(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                       2),
              HasSubstr("duplicate key 'a'"));
}

TEST(SafetensorsHeader, BadEntriesNameTheTensor) {
  EXPECT_THAT(error_of(R"({"w": 3})"), HasSubstr("tensor 'w': entry is not a JSON object"));
  EXPECT_THAT(error_of(R"({"w": {"dtype":"F32","shape":[1]}})"),
              HasSubstr("tensor 'w': missing \"data_offsets\""));
  EXPECT_THAT(error_of(R"({"w": {"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})", 4),
              HasSubstr("tensor 'w': unknown dtype 'Q4'"));
  EXPECT_THAT(error_of(R"({"w": {"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4),
              HasSubstr("\"dtype\" is not a string"));
  EXPECT_THAT(error_of(R"({"w": {"dtype":"F32","shape":3,"data_offsets":[0,4]}})", 4),
              HasSubstr("\"shape\" is not an array"));
  EXPECT_THAT(error_of(R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4),
              HasSubstr("not a pair of non-negative integers"));
  EXPECT_THAT(error_of(R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[0,-4]}})", 4),
              HasSubstr("not a pair of non-negative integers"));
  EXPECT_THAT(error_of(R"({"__metadata__": [1]})"),
              HasSubstr("\"__metadata__\" is not a JSON object"));
  EXPECT_THAT(error_of(R"({"__metadata__": {"k": 1}})"), HasSubstr("metadata 'k' is not a string"));
  EXPECT_THAT(error_of(R"({"": {"dtype":"U8","shape":[],"data_offsets":[0,1]}})", 1),
              HasSubstr("empty name"));
}

TEST(SafetensorsHeader, NegativeFractionalAndOverflowingShapes) {
  EXPECT_THAT(error_of(R"({"w": {"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
              HasSubstr("tensor 'w': shape entry -1 is not a non-negative integer"));
  EXPECT_THAT(error_of(R"({"w": {"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", 4),
              HasSubstr("is not a non-negative integer"));
  EXPECT_THAT(
      error_of(R"({"w": {"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,4]}})", 4),
      HasSubstr("is not a non-negative integer"));
  EXPECT_THAT(
      error_of(R"({"w": {"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]}})", 4),
      HasSubstr("overflows"));
  EXPECT_THAT(
      error_of(R"({"w": {"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4),
      HasSubstr("tensor 'w': shape [4294967296,4294967296] overflows"));
  // Zero in the shape makes any other dimension harmless.
  EXPECT_NO_THROW(parse_header(
      R"({"w": {"dtype":"F32","shape":[0,9223372036854775807],"data_offsets":[0,0]}})", 0, "x"));
}

TEST(SafetensorsHeader, OffsetsMustAgreeWithShapeAndTileTheData) {
  EXPECT_THAT(
      error_of(R"({"w": {"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20),
      HasSubstr("tensor 'w': F32 shape [2,3] needs 24 bytes but data_offsets [0, 20] hold 20"));
  EXPECT_THAT(error_of(R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4),
              HasSubstr("run backwards"));
  EXPECT_THAT(error_of(R"({"w": {"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 3),
              HasSubstr("tensor 'w': data_offsets [0, 4] go past the data section of 3 bytes"));
  EXPECT_THAT(error_of(R"({"a": {"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("b": {"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                       6),
              HasSubstr("tensor 'b': overlaps the tensor before it"));
  EXPECT_THAT(error_of(R"({"a": {"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("b": {"dtype":"F32","shape":[1],"data_offsets":[5,9]}})",
                       9),
              HasSubstr("tensor 'b': leaves a gap"));
  EXPECT_THAT(error_of(R"({"a": {"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8),
              HasSubstr("tensors cover 4 bytes but the data section has 8"));
}

TEST(SafetensorsHeader, NamesInMessagesStayOnOneLine) {
  const std::string message = error_of("{\"bad\\nname\": 1}");
  EXPECT_THAT(message, HasSubstr("tensor 'bad\\x0aname'"));
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

TEST(SafetensorsHeader, TruncatedAndOversizedFiles) {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  write_bytes(path, "abc");
  EXPECT_THAT(read_error(path), HasSubstr("'" + path + "': file is 3 bytes, too short"));
  // A length of 2^63 must be refused before anything is allocated.
  write_bytes(path, std::string("\0\0\0\0\0\0\0\x80{}", 10));
  EXPECT_THAT(read_error(path), HasSubstr("exceeds the limit"));
  write_bytes(path, file_bytes("{}", "").substr(0, 9));
  EXPECT_THAT(read_error(path), HasSubstr("header length 2 goes past the end of the 9-byte file"));
  EXPECT_THAT(read_error(dir.file("missing.safetensors")), HasSubstr("cannot open"));
  EXPECT_THAT(read_error(dir.path()), HasSubstr("not a regular file"));
}

// Thousands of damaged files: every one is either valid or refused with an
// accelerate::Error, never a crash or another exception type.
TEST(SafetensorsHeader, RandomMutationsOnlyThrowError) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("a.bias":{"dtype":"BF16","shape":[2],"data_offsets":[16,20]},"n":{"dtype":"I64","shape":[1],"data_offsets":[20,28]}})";
  const std::string original = file_bytes(header, std::string(28, '\7'));
  const auto stats = testing::run_mutations(original, 0x5afe, std::chrono::seconds(2), 2000, 20000,
                                            [&](const std::string& bytes) {
                                              write_bytes(path, bytes);
                                              read_header(path);
                                            });
  std::cout << "mutations: " << stats.tried << " tried, " << stats.accepted << " accepted, "
            << stats.refused << " refused (" << stats.refused_naming_tensor
            << " naming a tensor)\n";
  EXPECT_GT(stats.refused_naming_tensor, stats.tried / 40);
  EXPECT_GT(stats.refused, stats.tried / 4);
  EXPECT_EQ(stats.other_exceptions, 0u) << stats.first_other;
}

}  // namespace
}  // namespace accelerate::safetensors
