// save_model / load_model: state-dict names, Hugging Face's sharding and
// index, stale files, strict loading, tied weights and the pickle format.
// Interop with Python's torch: model_saving_interop_test.cpp.
#include "accelerate/checkpoint/model_saving.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/common/errors.h"
#include "checkpoint/safetensors_sharding.h"
#include "checkpoint/safetensors_test_files.h"

namespace accelerate {
namespace {

namespace fs = std::filesystem;
using safetensors::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Own parameter and buffer, a Sequential child, and a Linear without bias.
struct NetImpl : torch::nn::Module {
  NetImpl() {
    scale = register_parameter("scale", torch::ones({2}));
    steps = register_buffer("steps", torch::zeros({1}, torch::kLong));
    encoder = register_module(
        "encoder", torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3)));
    head = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(3, 2).bias(false)));
  }
  torch::Tensor scale, steps;
  torch::nn::Sequential encoder{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Net);

std::vector<std::string> names_of(const NamedTensors& tensors) {
  std::vector<std::string> names;
  for (const auto& item : tensors) names.push_back(item.first);
  return names;
}

std::vector<std::string> files_in(const std::string& directory) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void expect_same_state(const torch::nn::Module& a, const torch::nn::Module& b) {
  const auto x = module_state_dict(a), y = module_state_dict(b);
  ASSERT_EQ(names_of(x), names_of(y));
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_TRUE(torch::equal(x[i].second, y[i].second)) << x[i].first;
}

// Changes every value so a load has something to restore.
void scramble(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : module_state_dict(module)) {
    if (tensor.is_floating_point()) {
      tensor.add_(0.5);
    } else {
      tensor.add_(1);
    }
  }
}

TEST(ModelSaving, StateDictNamesAndOrderFollowPython) {
  Net net;
  EXPECT_THAT(names_of(module_state_dict(*net)),
              ElementsAre("scale", "steps", "encoder.0.weight", "encoder.0.bias",
                          "encoder.1.weight", "encoder.1.bias", "encoder.1.running_mean",
                          "encoder.1.running_var", "encoder.1.num_batches_tracked", "head.weight"));
}

TEST(ModelSaving, SingleFileRoundTrip) {
  TempDir dir;
  Net saved;
  EXPECT_THAT(save_model(*saved, dir.path()), ElementsAre("model.safetensors"));
  EXPECT_EQ(SafetensorsReader(dir.file("model.safetensors")).metadata().at("format"), "pt");
  Net loaded;
  scramble(*loaded);
  const auto result = load_model(*loaded, dir.path());
  EXPECT_TRUE(result.missing_keys.empty());
  EXPECT_TRUE(result.unexpected_keys.empty());
  expect_same_state(*saved, *loaded);
  EXPECT_TRUE(loaded->scale.requires_grad());
  EXPECT_TRUE(loaded->scale.is_leaf());
}

TEST(ModelSaving, ShardsFollowHuggingFaceRule) {
  TempDir dir;
  Net net;
  const auto state = module_state_dict(*net);
  std::vector<uint64_t> sizes;
  uint64_t total = 0;
  for (const auto& [name, t] : state) total += sizes.emplace_back(t.numel() * t.element_size());
  const auto plan = safetensors::plan_shards(sizes, 40);
  ASSERT_GT(plan.size(), 2u);

  const auto written = save_model(*net, dir.path(), SaveModelOptions().max_shard_size(40));
  ASSERT_EQ(written.size(), plan.size() + 1);
  EXPECT_EQ(written.back(), "model.safetensors.index.json");
  const auto index = safetensors::read_index(dir.file("model.safetensors.index.json"));
  EXPECT_EQ(index.total_size, total);
  for (size_t s = 0; s < plan.size(); ++s) {
    const std::string file = safetensors::shard_file_name("model", s, plan.size(), ".safetensors");
    EXPECT_EQ(written[s], file);
    std::vector<std::string> expected;
    for (size_t i : plan[s]) {
      expected.push_back(state[i].first);
      EXPECT_EQ(index.weight_map.at(state[i].first), file);
    }
    auto names = SafetensorsReader(dir.file(file)).names();
    std::sort(names.begin(), names.end());
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(names, expected) << file;
  }
  for (const std::string& path : {dir.path(), dir.file("model.safetensors.index.json")}) {
    Net loaded;
    scramble(*loaded);
    load_model(*loaded, path);
    expect_same_state(*net, *loaded);
  }
}

TEST(ModelSaving, ShardSizeStrings) {
  TempDir dir;
  Net net;
  EXPECT_EQ(save_model(*net, dir.path(), SaveModelOptions().max_shard_size("1KB")).size(), 1u);
  EXPECT_GT(save_model(*net, dir.path(), SaveModelOptions().max_shard_size("50B")).size(), 2u);
  EXPECT_EQ(SaveModelOptions().max_shard_size().bytes(), 10'000'000'000u);
  EXPECT_EQ(ShardSize(10'000'000'000LL).bytes(), 10'000'000'000u);
  EXPECT_THAT(
      [&] { save_model(*net, dir.path(), SaveModelOptions().max_shard_size("big")); },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr("max_shard_size 'big' is not a size")));
  EXPECT_THROW(save_model(*net, dir.path(), SaveModelOptions().max_shard_size(-1)), ConfigError);
}

TEST(ModelSaving, EarlierWeightFilesAreRemoved) {
  TempDir dir;
  Net net;
  std::ofstream(dir.file("optimizer.bin")) << "keep";
  std::ofstream(dir.file("model-00009-of-00009.safetensors")) << "stale";
  save_model(*net, dir.path(), SaveModelOptions().max_shard_size(40));
  EXPECT_FALSE(fs::exists(dir.file("model-00009-of-00009.safetensors")));
  save_model(*net, dir.path());
  EXPECT_THAT(files_in(dir.path()), ElementsAre("model.safetensors", "optimizer.bin"));
  save_model(*net, dir.path(), SaveModelOptions().max_shard_size(100000).safe_serialization(false));
  EXPECT_THAT(files_in(dir.path()), ElementsAre("optimizer.bin", "pytorch_model.bin"));
}

TEST(ModelSaving, StrictLoadListsNamesAndChangesNothing) {
  TempDir dir;
  auto small = torch::nn::Sequential(torch::nn::Linear(4, 3));
  save_model(*small, dir.path());
  Net net;
  const auto before = module_state_dict(*net)[2].second.clone();  // encoder.0.weight
  try {
    load_model(*net, dir.path());
    ADD_FAILURE() << "strict load_model accepted different names";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("missing keys: scale, steps, encoder.0.weight"));
    EXPECT_THAT(e.what(), HasSubstr("unexpected keys: 0.weight, 0.bias"));
  }
  EXPECT_TRUE(torch::equal(module_state_dict(*net)[2].second, before));

  // Non-strict: loads nothing here (no common names) and reports both lists.
  const auto result = load_model(*net, dir.path(), /*strict=*/false);
  EXPECT_EQ(result.missing_keys.size(), 10u);
  EXPECT_THAT(result.unexpected_keys, ElementsAre("0.weight", "0.bias"));
}

TEST(ModelSaving, ShapeOrDtypeMismatchNamesFileAndTensorAndChangesNothing) {
  TempDir dir;
  Net saved;
  save_model(*saved, dir.path());
  Net other;
  other->head->weight.set_data(torch::zeros({2, 5}));
  const auto scale_before = other->scale.clone();
  scramble(*other);
  const auto scrambled = other->scale.clone();
  EXPECT_THAT(
      [&] { load_model(*other, dir.path()); },
      ::testing::ThrowsMessage<Error>(AllOf(HasSubstr(dir.file("model.safetensors")),
                                            HasSubstr("tensor 'head.weight': is F32 [2, 3] in the "
                                                      "file but the destination is F32 [2, 5]"))));
  EXPECT_TRUE(torch::equal(other->scale, scrambled)) << "nothing loaded before the check failed";

  Net doubled;
  doubled->to(torch::kDouble);
  EXPECT_THAT([&] { load_model(*doubled, dir.path()); },
              ::testing::ThrowsMessage<Error>(HasSubstr("destination is F64")));
}

// Two submodules registering one tensor: a tied weight.
struct HalfImpl : torch::nn::Module {
  explicit HalfImpl(torch::Tensor shared) {
    weight = register_parameter("weight", std::move(shared));
    bias = register_parameter("bias", torch::randn({3}));
  }
  torch::Tensor weight, bias;
};
TORCH_MODULE(Half);

TEST(ModelSaving, TiedWeightsAreSavedOnceAndFillBothNames) {
  struct TiedImpl : torch::nn::Module {
    TiedImpl() {
      const auto shared = torch::randn({3, 3});
      embed = register_module("embed", Half(shared));
      out = register_module("out", Half(shared));
    }
    Half embed{nullptr}, out{nullptr};
  };
  TempDir dir;
  auto saved = std::make_shared<TiedImpl>();
  save_model(*saved, dir.path());
  EXPECT_THAT(SafetensorsReader(dir.file("model.safetensors")).names(),
              ::testing::UnorderedElementsAre("embed.weight", "embed.bias", "out.bias"));
  auto loaded = std::make_shared<TiedImpl>();
  scramble(*loaded);
  load_model(*loaded, dir.path());  // strict: out.weight is filled through its twin
  EXPECT_TRUE(torch::equal(loaded->out->weight, saved->embed->weight));
}

TEST(ModelSaving, PickleFormatRoundTrip) {
  TempDir dir;
  Net saved;
  EXPECT_THAT(save_model(*saved, dir.path(), SaveModelOptions().safe_serialization(false)),
              ElementsAre("pytorch_model.bin"));
  Net loaded;
  scramble(*loaded);
  load_model(*loaded, dir.path());
  expect_same_state(*saved, *loaded);
  save_model(*saved, dir.path(), SaveModelOptions().safe_serialization(false).max_shard_size(40));
  EXPECT_TRUE(fs::exists(dir.file("pytorch_model.bin.index.json")));
  Net sharded;
  scramble(*sharded);
  load_model(*sharded, dir.path());
  expect_same_state(*saved, *sharded);
}

TEST(ModelSaving, UnreadablePathsGiveOneLineErrors) {
  TempDir dir;
  Net net;
  EXPECT_THAT([&] { load_model(*net, dir.path()); },
              ::testing::ThrowsMessage<Error>(HasSubstr("no model.safetensors")));
  EXPECT_THAT([&] { load_model(*net, dir.file("none.safetensors")); },
              ::testing::ThrowsMessage<Error>(HasSubstr("cannot open")));
  std::ofstream(dir.file("model.safetensors.index.json"))
      << R"({"weight_map": {"scale": "model-00001-of-00001.safetensors"}})";
  EXPECT_THAT([&] { load_model(*net, dir.path()); },
              ::testing::ThrowsMessage<Error>(HasSubstr("model-00001-of-00001.safetensors")));
  std::ofstream(dir.file("pytorch_model.bin")) << "not a pickle";
  EXPECT_THAT([&] { load_model(*net, dir.file("pytorch_model.bin")); },
              ::testing::ThrowsMessage<Error>(HasSubstr("pytorch_model.bin")));
}

}  // namespace
}  // namespace accelerate
