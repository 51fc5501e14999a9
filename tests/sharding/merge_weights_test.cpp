// `accelerate merge-weights` on checkpoints that real jobs saved (ranks are
// threads with real collectives): the merged files are byte for byte what
// the same job's save_model wrote, at ZeRO stages 1 to 3 on 2 and 3
// processes, whole and sharded by size; --dtype rounds as LibTorch does; a
// torn or incomplete checkpoint is refused naming what is missing, and
// nothing is left behind.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/checkpoint/model_saving.h"
#include "accelerate/sharding/fsdp_plugin.h"
#include "checkpoint/float_narrowing.h"
#include "sharding/zero_test_model.h"
#include "support/process_runner.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

namespace merge_weights_test {

namespace fs = std::filesystem;
using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::DeepSpeedPlugin;
using accelerate::testing::BlockStack;
using accelerate::testing::Call;
using ::testing::HasSubstr;

constexpr int kDepth = 4, kWidth = 64, kHidden = 128;
// About one block (fp32): sharded output has several files.
constexpr int64_t kShardBytes = (kWidth * kHidden + kHidden + kHidden * kWidth + kWidth) * 4 + 1000;

// Trains one epoch at ZeRO `stage` on `world` processes, then saves
// save_model's files whole (model/) and sharded (sharded/) and the state
// (checkpoint/) under `dir`.
void train_and_save(int stage, int world, const std::string& dir) {
  accelerate::testing::run_rank_communicators(world, [&](std::shared_ptr<Communicator> comm) {
    Accelerator accelerator(
        std::move(comm), AcceleratorOptions().deepspeed_plugin(
                             DeepSpeedPlugin().zero_stage(stage).gradient_clipping(std::nullopt)));
    BlockStack model(Call::kUnitForward, kDepth, kWidth, kHidden);
    accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                         torch::optim::AdamWOptions(0.01));
    accelerate::DataLoader loader(accelerate::testing::zero_data(48),
                                  accelerate::DataLoaderOptions(8));
    accelerator.prepare(model, optimizer, loader);
    for (auto& batch : loader) {
      accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
      optimizer.step();
      optimizer.zero_grad();
    }
    accelerator.save_model(model, dir + "/model");
    accelerator.save_model(model, dir + "/sharded",
                           accelerate::SaveModelOptions().max_shard_size(kShardBytes));
    accelerator.save_state(dir + "/checkpoint");
  });
}

accelerate::testing::RunResult merge(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {ACCELERATE_CLI_PATH, "merge-weights"};
  argv.insert(argv.end(), args.begin(), args.end());
  return accelerate::testing::run_program(argv, {}, std::chrono::seconds(60));
}

std::string contents(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::map<std::string, std::string> folder_files(const fs::path& folder) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(folder)) {
    files[entry.path().filename().string()] = contents(entry.path());
  }
  return files;
}

void expect_same_files(const fs::path& want, const fs::path& got) {
  const auto left = folder_files(want), right = folder_files(got);
  ASSERT_FALSE(left.empty()) << want;
  for (const auto& [name, bytes] : left) {
    ASSERT_TRUE(right.count(name)) << name << " is missing from " << got;
    EXPECT_TRUE(bytes == right.at(name)) << name << " differs between " << want << " and " << got;
  }
  EXPECT_EQ(left.size(), right.size()) << want << " vs " << got;
}

class MergeWeights : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(MergeWeights, OutputIsTheBytesOfTheSameRunsSaveModel) {
  const auto [stage, world] = GetParam();
  accelerate::testing::TempDir dir("merge-weights");
  train_and_save(stage, world, dir.path());
  // Stage 3 saves each process's pieces; stages 1 and 2 one whole file.
  ASSERT_EQ(fs::exists(dir.file("checkpoint/model_rank0.safetensors")), stage == 3);

  const auto whole = merge({dir.file("checkpoint"), dir.file("merged")});
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  expect_same_files(dir.file("model"), dir.file("merged"));

  const auto sharded = merge({dir.file("checkpoint"), dir.file("merged-sharded"),
                              "--max_shard_size", std::to_string(kShardBytes)});
  ASSERT_EQ(sharded.exit_code, 0) << sharded.err;
  EXPECT_GT(folder_files(dir.file("sharded")).size(), 3u)
      << "save_model should have split the model";
  expect_same_files(dir.file("sharded"), dir.file("merged-sharded"));
}

INSTANTIATE_TEST_SUITE_P(StagesAndProcesses, MergeWeights,
                         ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Values(2, 3)));

// Hybrid sharding (2 machines of 2 processes) saves one copy of the pieces,
// cut for one machine's 2 processes: the merge reads those, not 4.
TEST(MergeWeightsHybrid, OneCopyOfThePiecesMergesToTheBytesOfSaveModel) {
  accelerate::testing::TempDir dir("merge-weights-hybrid");
  accelerate::testing::run_ranks_of_jobs(
      4,
      [](int rank) {
        accelerate::JobState job = accelerate::testing::thread_rank_job(rank, 4);
        job.node_rank = rank / 2;
        job.num_nodes = 2;
        job.local_rank = rank % 2;
        job.local_world_size = 2;
        return job;
      },
      [&](int, std::shared_ptr<Communicator> comm) {
        Accelerator accelerator(
            std::move(comm),
            AcceleratorOptions().fsdp_plugin(
                accelerate::FullyShardedDataParallelPlugin()
                    .sharding_strategy(accelerate::FsdpShardingStrategy::kHybridShard)
                    .auto_wrap_policy(accelerate::FsdpAutoWrapPolicy::kTransformerBasedWrap)
                    .transformer_cls_names_to_wrap({"ResidualBlock"})
                    .state_dict_type(accelerate::FsdpStateDictType::kShardedStateDict)));
        BlockStack model(Call::kUnitForward, kDepth, kWidth, kHidden);
        accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                             torch::optim::AdamWOptions(0.01));
        accelerator.prepare(model, optimizer);
        accelerator.save_model(model, dir.path() + "/model");
        accelerator.save_state(dir.path() + "/checkpoint");
      });
  ASSERT_TRUE(fs::exists(dir.file("checkpoint/model_rank1.safetensors")));
  ASSERT_FALSE(fs::exists(dir.file("checkpoint/model_rank2.safetensors")));
  const auto merged = merge({dir.file("checkpoint"), dir.file("merged")});
  ASSERT_EQ(merged.exit_code, 0) << merged.err;
  expect_same_files(dir.file("model"), dir.file("merged"));
}

// --dtype: the bytes save_model writes for the merged model cast to bf16 or
// fp16 (LibTorch's rounding); --remove_checkpoint_dir deletes the
// checkpoint only after the output is in place.
TEST(MergeWeightsOptions, DtypeIsSaveModelOfTheCastModelAndRemovalComesLast) {
  accelerate::testing::TempDir dir("merge-weights-dtype");
  train_and_save(3, 2, dir.path());
  for (const auto& [flag, type] : std::vector<std::pair<std::string, at::ScalarType>>{
           {"bf16", at::kBFloat16}, {"fp16", at::kHalf}}) {
    BlockStack model(Call::kDirect, kDepth, kWidth, kHidden);
    accelerate::load_model(*model, dir.file("model"));
    model->to(type);
    accelerate::save_model(*model, dir.file("cast-" + flag));
    const auto result =
        merge({dir.file("checkpoint"), dir.file("merged-" + flag), "--dtype", flag});
    ASSERT_EQ(result.exit_code, 0) << result.err;
    expect_same_files(dir.file("cast-" + flag), dir.file("merged-" + flag));
  }

  const auto inside =
      merge({dir.file("checkpoint"), dir.file("checkpoint/out"), "--remove_checkpoint_dir"});
  EXPECT_EQ(inside.exit_code, 1);
  EXPECT_THAT(inside.err, HasSubstr("--remove_checkpoint_dir would delete the output"));
  EXPECT_TRUE(fs::exists(dir.file("checkpoint/accelerate_checkpoint.json")));

  const auto removed =
      merge({dir.file("checkpoint"), dir.file("merged"), "--remove_checkpoint_dir"});
  ASSERT_EQ(removed.exit_code, 0) << removed.err;
  EXPECT_FALSE(fs::exists(dir.file("checkpoint")));
  expect_same_files(dir.file("model"), dir.file("merged"));
}

// Each way a checkpoint can be torn is refused with one line naming the
// missing or broken piece, exit code 1, and no output or staging folder.
TEST(MergeWeightsRefusals, TornOrIncompleteCheckpointsAreRefusedNamingThePiece) {
  accelerate::testing::TempDir dir("merge-weights-torn");
  train_and_save(3, 2, dir.path());
  const std::string good = dir.file("checkpoint");
  const auto torn = [&](const std::string& name, const std::function<void(const fs::path&)>& tear,
                        const std::string& message) {
    const fs::path copy = dir.file(name);
    fs::copy(good, copy);
    tear(copy);
    const auto result = merge({copy.string(), dir.file("out-" + name)});
    EXPECT_EQ(result.exit_code, 1) << name;
    EXPECT_THAT(result.err, HasSubstr(message)) << name;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
    for (const auto& entry : fs::directory_iterator(dir.path())) {
      EXPECT_THAT(entry.path().filename().string(), ::testing::Not(HasSubstr("out-"))) << name;
    }
  };
  torn(
      "no-rank1", [](const fs::path& c) { fs::remove(c / "model_rank1.safetensors"); },
      "model_rank1.safetensors is missing (process 1's pieces of model 0)");
  torn(
      "truncated",
      [](const fs::path& c) {
        fs::resize_file(c / "model_rank0.safetensors",
                        fs::file_size(c / "model_rank0.safetensors") - 100);
      },
      "model_rank0.safetensors");
  torn(
      "no-index", [](const fs::path& c) { fs::remove(c / "model_shards.json"); },
      "model_shards.json is missing (the model's shard index)");
  torn(
      "incomplete", [](const fs::path& c) { fs::remove(c / "accelerate_checkpoint.json"); },
      "is not a complete accelerate-cpp checkpoint");
  // A rank file of another save: the index's pieces no longer match it.
  torn(
      "other-save",
      [](const fs::path& c) {
        std::ofstream(c / "model_rank1.safetensors", std::ios::binary | std::ios::trunc)
            << contents(c / "model_rank0.safetensors");
      },
      "model_rank1.safetensors: tensor");

  // An existing folder with files in it is never replaced.
  fs::create_directories(dir.file("full"));
  std::ofstream(dir.file("full/config.json")) << "{}";
  const auto full = merge({good, dir.file("full")});
  EXPECT_EQ(full.exit_code, 1);
  EXPECT_THAT(full.err, HasSubstr("exists and is not empty"));
  EXPECT_EQ(folder_files(dir.file("full")).size(), 1u);
}

TEST(MergeWeightsRefusals, UnsafeSerializationIsRefusedWithTheReason) {
  const auto result = merge({"checkpoint", "out", "--unsafe_serialization"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(
      result.err,
      HasSubstr("--unsafe_serialization is refused: merge-weights writes safetensors only"));
  // A folder that is not there is bad input (exit 2, as in launch and estimate-memory).
  const auto missing = merge({"no-such-checkpoint", "out"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_EQ(missing.err,
            "accelerate merge-weights: error: no-such-checkpoint: no such checkpoint folder\n");
  const auto help = merge({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("usage: accelerate merge-weights CHECKPOINT_DIR OUTPUT_DIR"));
}

// The torch-free rounding is LibTorch's for every value but NaN (whose bits
// LibTorch's vectorised and scalar paths disagree on).
TEST(MergeWeightsRounding, SixteenBitRoundingMatchesLibTorch) {
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               65504.0f,
                               65519.0f,
                               65520.0f,
                               1e-8f,
                               2.98e-8f,
                               5.96e-8f,
                               6.1e-5f,
                               3e38f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::denorm_min()};
  std::mt19937 random(7);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t bits = random();
    values.push_back(accelerate::safetensors::float_from_bits(bits));
    values.push_back(accelerate::safetensors::float_from_bits((bits & 0x80FFFFFFu) |
                                                              0x38000000u));  // near fp16's range
  }
  const at::Tensor source = torch::tensor(values);
  const at::Tensor bf16 = source.to(at::kBFloat16), half = source.to(at::kHalf);
  const auto* bf16_bits = reinterpret_cast<const uint16_t*>(bf16.data_ptr());
  const auto* half_bits = reinterpret_cast<const uint16_t*>(half.data_ptr());
  const at::Tensor widened = half.to(at::kFloat), bf16_widened = bf16.to(at::kFloat);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) {
      EXPECT_TRUE(std::isnan(accelerate::safetensors::float_from_bfloat16(
          accelerate::safetensors::bfloat16_bits(values[i]))));
      EXPECT_TRUE(std::isnan(
          accelerate::safetensors::float_from_half(accelerate::safetensors::half_bits(values[i]))));
      continue;
    }
    ASSERT_EQ(accelerate::safetensors::bfloat16_bits(values[i]), bf16_bits[i]) << values[i];
    ASSERT_EQ(accelerate::safetensors::half_bits(values[i]), half_bits[i]) << values[i];
    // And back: 16 bits widen exactly, as LibTorch widens them.
    ASSERT_EQ(
        accelerate::safetensors::bits_of(accelerate::safetensors::float_from_half(half_bits[i])),
        accelerate::safetensors::bits_of(widened.data_ptr<float>()[i]));
    ASSERT_EQ(accelerate::safetensors::bits_of(
                  accelerate::safetensors::float_from_bfloat16(bf16_bits[i])),
              accelerate::safetensors::bits_of(bf16_widened.data_ptr<float>()[i]));
  }
}

}  // namespace merge_weights_test
