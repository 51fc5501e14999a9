// Torch-free parts of save_model: size strings, Hugging Face's sharding
// rule, shard names and index files.
#include "checkpoint/safetensors_sharding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "accelerate/common/errors.h"
#include "checkpoint/safetensors_test_files.h"

namespace accelerate::safetensors {
namespace {

using ::testing::HasSubstr;
using Shards = std::vector<std::vector<size_t>>;

TEST(SafetensorsSharding, ParsesSizesLikeHuggingFace) {
  EXPECT_EQ(parse_size("10GB"), 10'000'000'000u);
  EXPECT_EQ(parse_size("5MB"), 5'000'000u);
  EXPECT_EQ(parse_size("100KB"), 100'000u);
  EXPECT_EQ(parse_size("2GiB"), 2u << 30);
  EXPECT_EQ(parse_size("3MiB"), 3u << 20);
  EXPECT_EQ(parse_size("1KiB"), 1024u);
  EXPECT_EQ(parse_size("8Mb"), 1'000'000u) << "lower-case b means bits";
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("12B"), 12u);
  EXPECT_EQ(parse_size("5gb"), 625'000'000u);
  for (const char* bad :
       {"", "GB", "1.5GB", "-5MB", "5 MB", "5TB", "99999999999999999999GB", "20000000000GB"}) {
    EXPECT_THROW(parse_size(bad), ConfigError) << bad;
  }
  EXPECT_THAT([] { parse_size("lots"); }, ::testing::ThrowsMessage<ConfigError>(
                                              HasSubstr("max_shard_size 'lots' is not a size")));
}

TEST(SafetensorsSharding, GreedyInOrderWithOversizedTensorsAlone) {
  EXPECT_EQ(plan_shards({}, 10), (Shards{{}}));
  EXPECT_EQ(plan_shards({4, 4, 2}, 10), (Shards{{0, 1, 2}}));
  EXPECT_EQ(plan_shards({4, 4, 3}, 10), (Shards{{0, 1}, {2}}));
  // A tensor larger than the limit sits alone; packing resumes after it.
  EXPECT_EQ(plan_shards({3, 25, 3, 3}, 10), (Shards{{0}, {1}, {2, 3}}));
  EXPECT_EQ(plan_shards({25}, 10), (Shards{{0}}));
  EXPECT_EQ(plan_shards({0, 0, 10, 0, 1}, 10), (Shards{{0, 1, 2, 3}, {4}}));
  // Zero-byte limit: every tensor alone. Huge sizes do not overflow.
  EXPECT_EQ(plan_shards({1, 1}, 0), (Shards{{0}, {1}}));
  EXPECT_EQ(plan_shards({~0ull - 1, ~0ull - 1}, ~0ull), (Shards{{0}, {1}}));
}

TEST(SafetensorsSharding, ShardFileNames) {
  EXPECT_EQ(shard_file_name("model", 0, 3, ".safetensors"), "model-00001-of-00003.safetensors");
  EXPECT_EQ(shard_file_name("pytorch_model", 11, 12, ".bin"), "pytorch_model-00012-of-00012.bin");
  EXPECT_TRUE(is_shard_file_name("model-00002-of-00007.safetensors", "model", ".safetensors"));
  EXPECT_FALSE(is_shard_file_name("model-0002-of-00007.safetensors", "model", ".safetensors"));
  EXPECT_FALSE(is_shard_file_name("model-00002-of-00007.bin", "model", ".safetensors"));
  EXPECT_FALSE(is_shard_file_name("other-00002-of-00007.safetensors", "model", ".safetensors"));
  EXPECT_FALSE(is_shard_file_name("model-0000x-of-00007.safetensors", "model", ".safetensors"));
}

TEST(SafetensorsSharding, IndexRoundTripAndValidation) {
  testing::TempDir dir;
  ShardIndex index;
  index.total_size = 1234;
  index.weight_map = {{"b.weight", "model-00002-of-00002.safetensors"},
                      {"a.weight", "model-00001-of-00002.safetensors"}};
  const std::string text = index_json(index);
  EXPECT_EQ(text,
            "{\n  \"metadata\": {\n    \"total_size\": 1234\n  },\n  \"weight_map\": {\n"
            "    \"a.weight\": \"model-00001-of-00002.safetensors\",\n"
            "    \"b.weight\": \"model-00002-of-00002.safetensors\"\n  }\n}\n");
  testing::write_bytes(dir.file("i.json"), text);
  const ShardIndex read = read_index(dir.file("i.json"));
  EXPECT_EQ(read.total_size, 1234u);
  EXPECT_EQ(read.weight_map, index.weight_map);
  EXPECT_EQ(read.files, (std::vector<std::string>{"model-00001-of-00002.safetensors",
                                                  "model-00002-of-00002.safetensors"}));

  auto error_of = [&](const std::string& body) -> std::string {
    testing::write_bytes(dir.file("bad.json"), body);
    try {
      read_index(dir.file("bad.json"));
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_THAT(error_of("{"), HasSubstr("bad.json': not valid JSON"));
  EXPECT_THAT(error_of("{\"metadata\": {}}"), HasSubstr("no \"weight_map\" object"));
  EXPECT_THAT(error_of(R"({"weight_map": {"a": 1}})"), HasSubstr("entry 'a' is not a file name"));
  EXPECT_THAT(error_of(R"({"weight_map": {"a": "../x.safetensors"}})"),
              HasSubstr("not a plain file name"));
  EXPECT_THAT(error_of(R"({"weight_map": {"a": ".."}})"), HasSubstr("not a plain file name"));
  EXPECT_THAT(error_of(R"({"weight_map": {}})"), HasSubstr("(no error)"));
}

}  // namespace
}  // namespace accelerate::safetensors
