// save_model / load_model against Python's torch, both directions, and the
// pickle format read by torch.load. Skipped where /usr/bin/python3 cannot
// import torch (the LibTorch 2.6 chroot).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

#include "accelerate/checkpoint/model_saving.h"
#include "checkpoint/safetensors_python.h"
#include "checkpoint/safetensors_sharding.h"
#include "checkpoint/safetensors_test_files.h"

namespace accelerate {
namespace {

using safetensors::testing::TempDir;

// The model of tests/checkpoint/safetensors_interop.py.
torch::nn::Sequential python_model() {
  return torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::ReLU(), torch::nn::Linear(8, 3),
                               torch::nn::BatchNorm1d(3));
}

// Python's torch writes (whole and sharded); LibTorch loads and computes the
// same output; our save of that model, with the same shard limit, gives the
// same shards and Python computes the same output from it.
TEST(ModelSavingInterop, PythonTorchBothDirections) {
  if (!safetensors::testing::have_python_torch()) {
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch and numpy (e.g. the LibTorch 2.6 chroot)";
  }
  for (const uint64_t max_shard_size : {uint64_t{0}, uint64_t{200}}) {
    SCOPED_TRACE("max_shard_size " + std::to_string(max_shard_size));
    TempDir python_dir, our_dir;
    std::vector<std::string> args = {"torch-write", python_dir.path()};
    if (max_shard_size) args.push_back(std::to_string(max_shard_size));
    safetensors::testing::run_interop(args);
    std::ifstream in(python_dir.file("expected.json"));
    ASSERT_TRUE(in) << "the Python writer made no expected.json";
    const auto expected = nlohmann::json::parse(in);

    auto model = python_model();
    load_model(*model, python_dir.path());
    model->eval();
    const auto state = module_state_dict(*model);
    ASSERT_EQ(state.size(), expected["state"].size());
    for (size_t i = 0; i < state.size(); ++i) {
      EXPECT_EQ(state[i].first, expected["state"][i]["name"]) << "state-dict order";
      safetensors::testing::expect_same(expected["state"][i], state[i].second, state[i].first);
    }
    const auto input = safetensors::testing::tensor_from(expected["input"]);
    const auto output = model->forward(input);
    EXPECT_TRUE(
        torch::allclose(output, safetensors::testing::tensor_from(expected["output"]), 1e-6, 1e-6));

    SaveModelOptions options;
    if (max_shard_size) options.max_shard_size(max_shard_size);
    const auto written = save_model(*model, our_dir.path(), options);
    if (max_shard_size) {
      const auto index = safetensors::read_index(our_dir.file("model.safetensors.index.json"));
      const auto& shards = expected["shards"];
      ASSERT_EQ(written.size(), shards.size() + 1);
      for (size_t s = 0; s < shards.size(); ++s) {
        for (const auto& name : shards[s])
          EXPECT_EQ(index.weight_map.at(name.get<std::string>()), written[s]);
      }
    }
    std::ofstream(our_dir.file("input.json")) << expected["input"].dump();
    const auto python_output = safetensors::testing::run_interop(
        {"torch-check", our_dir.path(), our_dir.file("input.json")});
    ASSERT_FALSE(python_output.is_null());
    safetensors::testing::expect_same(
        python_output, safetensors::testing::tensor_from(expected["output"]), "output");
  }
}

// safe_serialization(false) writes what Python's torch.load reads.
TEST(ModelSavingInterop, PythonTorchLoadsPickleFormat) {
  if (!safetensors::testing::have_python_torch()) {
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch and numpy (e.g. the LibTorch 2.6 chroot)";
  }
  TempDir dir;
  auto model = python_model();
  save_model(*model, dir.path(), SaveModelOptions().safe_serialization(false));
  const auto description =
      safetensors::testing::run_interop({"torch-load", dir.file("pytorch_model.bin")});
  ASSERT_FALSE(description.is_null());
  const auto state = module_state_dict(*model);
  ASSERT_EQ(description["tensors"].size(), state.size());
  std::map<std::string, at::Tensor> by_name(state.begin(), state.end());
  for (const auto& entry : description["tensors"]) {
    const std::string name = entry["name"];
    ASSERT_TRUE(by_name.count(name)) << name;
    safetensors::testing::expect_same(entry, by_name.at(name), name);
  }
}

}  // namespace
}  // namespace accelerate
