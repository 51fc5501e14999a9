// Saving at ZeRO stage 3 without a whole model on any process: save_model
// and save_state's model file are written unit by unit (each unit gathered,
// its tensors written by the main process, freed again), and the files are
// byte for byte those data parallelism writes after the same training
// (stage 3 trains bitwise as stage 0 here: rank-ordered sums). A counting
// CPU allocator shows the saves never hold more than a unit or so above the
// shards. Ranks are threads with real collectives.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/common/errors.h"
#include "accelerate/sharding/fsdp_plugin.h"
#include "compat/memory_compat.h"
#include "parallel/storage_release.h"
#include "sharding/zero_test_model.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

namespace zero3_saving_test {

namespace fs = std::filesystem;
using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::FsdpAutoWrapPolicy;
using accelerate::FsdpShardingStrategy;
using accelerate::FsdpStateDictType;
using accelerate::FullyShardedDataParallelPlugin;
using accelerate::testing::BlockStack;
using accelerate::testing::Call;
using accelerate::testing::zero_data;

constexpr int kDepth = 4, kWidth = 64, kHidden = 128;
// One block's bytes (fp32): Linear(64, 128) and Linear(128, 64).
constexpr int64_t kUnitBytes = (kWidth * kHidden + kHidden + kHidden * kWidth + kWidth) * 4;

std::optional<FullyShardedDataParallelPlugin> full_shard(FsdpStateDictType type) {
  return FullyShardedDataParallelPlugin()
      .sharding_strategy(FsdpShardingStrategy::kFullShard)
      .auto_wrap_policy(FsdpAutoWrapPolicy::kTransformerBasedWrap)
      .transformer_cls_names_to_wrap({"ResidualBlock"})
      .state_dict_type(type);
}

// One process of a job training kDepth blocks with AdamW under `options`
// (no plugin: data parallelism), prepared.
struct Training {
  Training(std::shared_ptr<Communicator> comm, AcceleratorOptions options, int64_t samples)
      : accelerator(std::move(comm), std::move(options)),
        model(Call::kUnitForward, kDepth, kWidth, kHidden),
        optimizer(model->parameters(), torch::optim::AdamWOptions(0.01)),
        loader(zero_data(samples), accelerate::DataLoaderOptions(8)) {
    accelerator.prepare(model, optimizer, loader);
  }
  void train_epoch() {
    for (auto& batch : loader) {
      accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
      optimizer.step();
      optimizer.zero_grad();
    }
  }
  Accelerator accelerator;
  BlockStack model;
  accelerate::Optimizer<torch::optim::AdamW> optimizer;
  accelerate::DataLoader<accelerate::TensorDataset> loader;
};

// Trains 2 epochs on `comm`'s job, then saves into `dir`: save_model whole
// (model/) and in shards of about one unit (sharded/), and save_state
// (checkpoint/). Returns the most CPU tensor bytes the saves added, over
// all ranks (rank 0's answer).
int64_t train_and_save(std::shared_ptr<Communicator> comm,
                       const std::optional<FullyShardedDataParallelPlugin>& plugin,
                       const std::string& dir) {
  Training job(std::move(comm), AcceleratorOptions().fsdp_plugin(plugin), 64);
  job.train_epoch();
  job.train_epoch();
  Accelerator& accelerator = job.accelerator;
  accelerator.wait_for_everyone();
  const int64_t before = accelerate::compat::cpu_live_bytes();
  if (accelerator.is_main_process()) accelerate::compat::reset_cpu_peak_bytes();
  accelerator.wait_for_everyone();
  accelerator.save_model(job.model, dir + "/model");
  accelerator.save_model(job.model, dir + "/sharded",
                         accelerate::SaveModelOptions().max_shard_size(kUnitBytes + 1000));
  accelerator.save_state(dir + "/checkpoint");
  accelerator.wait_for_everyone();
  return accelerate::compat::cpu_peak_bytes() - before;
}

int64_t run(const std::optional<FullyShardedDataParallelPlugin>& plugin, const std::string& dir) {
  int64_t added = 0;
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    const int64_t mine = train_and_save(comm, plugin, dir);
    if (rank == 0) added = mine;
  });
  return added;
}

std::string contents(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Every file under `a` is under `b` with the same bytes, and the reverse.
void expect_same_files(const fs::path& a, const fs::path& b) {
  std::map<std::string, std::string> left, right;
  for (const auto& entry : fs::directory_iterator(a)) {
    left[entry.path().filename().string()] = contents(entry.path());
  }
  for (const auto& entry : fs::directory_iterator(b)) {
    right[entry.path().filename().string()] = contents(entry.path());
  }
  ASSERT_FALSE(left.empty()) << a;
  for (const auto& [name, bytes] : left) {
    ASSERT_TRUE(right.count(name)) << name << " is missing from " << b;
    EXPECT_TRUE(bytes == right[name]) << name << " differs between " << a << " and " << b;
  }
  EXPECT_EQ(left.size(), right.size()) << a << " vs " << b;
}

TEST(Zero3Saving, SaveModelAndFullStateDictWriteDataParallelismsFilesUnitByUnit) {
  accelerate::compat::install_cpu_allocation_counter();
  accelerate::testing::TempDir dir("zero3-saving");
  const std::string reference = dir.path() + "/stage0", sharded = dir.path() + "/stage3";
  const int64_t reference_added = run(std::nullopt, reference);
  const int64_t sharded_added = run(full_shard(FsdpStateDictType::kFullStateDict), sharded);

  expect_same_files(reference + "/model", sharded + "/model");
  expect_same_files(reference + "/sharded", sharded + "/sharded");
  EXPECT_GT(std::distance(fs::directory_iterator(sharded + "/sharded"), fs::directory_iterator()),
            3)
      << "max_shard_size of about a unit should split the model";
  EXPECT_EQ(contents(reference + "/checkpoint/model.safetensors"),
            contents(sharded + "/checkpoint/model.safetensors"));

  // Gathering every unit at once would add kDepth units on each of the 2
  // processes; unit by unit adds one (two while the next one's gather
  // overlaps), plus what the collectives hold for a moment.
  EXPECT_LT(sharded_added, 2 * 2 * kUnitBytes + kUnitBytes / 2)
      << "the stage-3 saves held more than a unit or two per process (data parallelism's: "
      << reference_added << " bytes)";
}

// The main process cannot write (a file where the folder should be): every
// process gets the error, none waits in a gather the main process skipped,
// and the units are freed again.
TEST(Zero3Saving, AFailedStreamedSaveIsAnErrorOnEveryProcess) {
  accelerate::testing::TempDir dir("zero3-saving-error");
  const std::string blocked = dir.path() + "/file";
  std::ofstream(blocked) << "in the way";
  std::vector<std::string> errors(2);
  std::vector<bool> released(2);
  accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    AcceleratorOptions options;
    options.fsdp_plugin(full_shard(FsdpStateDictType::kFullStateDict));
    Accelerator accelerator(std::move(comm), options);
    BlockStack model(Call::kUnitForward, kDepth, kWidth, kHidden);
    accelerator.prepare(model);
    {
      torch::NoGradGuard no_grad;
      model->forward(torch::ones({2, 4}));  // the units run once: freed from now on
    }
    try {
      accelerator.save_model(model, blocked + "/model");
    } catch (const accelerate::Error& e) {
      errors[rank] = e.what();
    }
    released[rank] = accelerate::detail::storage_released(model->blocks[0]->parameters()[0]);
  });
  EXPECT_THAT(errors[0], ::testing::HasSubstr("cannot create folder"));
  EXPECT_THAT(errors[1], ::testing::HasSubstr("save_model failed on the main process"));
  EXPECT_TRUE(released[0] && released[1]);
}

// A job of `world` processes with `plugin` (none: data parallelism, or one
// process) that trains 2 epochs and saves its state into `save_to`, or
// loads `load_from` after prepare(). Returns rank 0's whole weights, and
// each rank's error.
struct Job {
  int world = 2;
  std::optional<FullyShardedDataParallelPlugin> plugin;
  std::string save_to, load_from;
};
struct JobResult {
  std::vector<at::Tensor> weights;
  std::vector<std::string> errors;
};

JobResult run_job(const Job& job) {
  JobResult result;
  result.errors.resize(job.world);
  accelerate::testing::run_rank_communicators(job.world, [&](std::shared_ptr<Communicator> comm) {
    const int rank = comm->rank();
    Training training(std::move(comm), AcceleratorOptions().fsdp_plugin(job.plugin), 48);
    try {
      if (!job.load_from.empty()) training.accelerator.load_state(job.load_from);
    } catch (const accelerate::Error& e) {
      result.errors[rank] = e.what();
      return;
    }
    if (!job.save_to.empty()) {
      training.train_epoch();
      training.accelerator.save_state(job.save_to);
    }
    std::vector<at::Tensor> weights;
    for (const auto& entry : training.accelerator.get_state_dict(training.model)) {
      weights.push_back(entry.second);
    }
    if (rank == 0) result.weights = weights;
  });
  return result;
}

void expect_weights(const JobResult& got, const std::vector<at::Tensor>& want,
                    const std::string& what) {
  for (const auto& error : got.errors) ASSERT_EQ(error, "") << what;
  ASSERT_EQ(got.weights.size(), want.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(at::equal(got.weights[i], want[i])) << what << ", tensor " << i;
  }
}

// SHARDED_STATE_DICT: each process writes the elements its shards hold and
// the main process an index; the checkpoint loads, bitwise, on 1 process
// (data parallelism's whole model), on 2 and 3 processes at stage 3 (each
// reads its own elements), and into a FULL_STATE_DICT job. A FULL_STATE_DICT
// checkpoint loads into a stage-3 job too.
TEST(Zero3Saving, ShardedStateDictIsPiecesPerProcessAndLoadsOnOneTwoAndThree) {
  accelerate::testing::TempDir dir("zero3-sharded-state");
  const auto sharded = full_shard(FsdpStateDictType::kShardedStateDict);
  const auto full = full_shard(FsdpStateDictType::kFullStateDict);
  const std::string pieces = dir.path() + "/pieces", whole = dir.path() + "/whole";
  const JobResult saved = run_job({2, sharded, pieces, ""});
  ASSERT_FALSE(saved.weights.empty());
  BlockStack initial(Call::kUnitForward, kDepth, kWidth, kHidden);
  ASSERT_FALSE(at::equal(saved.weights[0], initial->parameters()[0])) << "training moved nothing";

  EXPECT_FALSE(fs::exists(pieces + "/model.safetensors"));
  const std::string index = contents(pieces + "/model_shards.json");
  EXPECT_NE(index.find("\"world_size\": 2"), std::string::npos) << index.substr(0, 200);
  int64_t model_bytes = 0;
  for (const auto& p : initial->parameters()) model_bytes += p.numel() * 4;
  for (int r = 0; r < 2; ++r) {
    const fs::path file = pieces + "/model_rank" + std::to_string(r) + ".safetensors";
    ASSERT_TRUE(fs::exists(file)) << file;
    EXPECT_LT(static_cast<int64_t>(fs::file_size(file)), model_bytes * 6 / 10)
        << file << " should hold about half of the " << model_bytes << " bytes";
  }

  expect_weights(run_job({1, std::nullopt, "", pieces}), saved.weights, "1 process");
  expect_weights(run_job({2, sharded, "", pieces}), saved.weights, "2 processes");
  expect_weights(run_job({3, sharded, "", pieces}), saved.weights, "3 processes");
  expect_weights(run_job({2, full, "", pieces}), saved.weights, "FULL_STATE_DICT job");

  // Stage 2 on several processes cuts other buckets: refused, saying why.
  const auto shard_grad_op =
      FullyShardedDataParallelPlugin().sharding_strategy(FsdpShardingStrategy::kShardGradOp);
  for (const auto& error : run_job({2, shard_grad_op, "", pieces}).errors) {
    EXPECT_NE(error.find("whether ZeRO stage 3 cuts it per unit"), std::string::npos) << error;
  }

  const JobResult saved_whole = run_job({2, full, whole, ""});
  EXPECT_TRUE(fs::exists(whole + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(whole + "/model_rank0.safetensors"));
  expect_weights(run_job({3, sharded, "", whole}), saved_whole.weights, "whole file on 3");
}

// A piece file gone, or an index whose pieces leave a gap: every process
// gets one clear error, before anything changed.
TEST(Zero3Saving, AMissingOrInconsistentPieceIsAClearErrorOnEveryProcess) {
  accelerate::testing::TempDir dir("zero3-sharded-bad");
  const auto sharded = full_shard(FsdpStateDictType::kShardedStateDict);
  const std::string missing = dir.path() + "/missing", gap = dir.path() + "/gap";
  run_job({2, sharded, missing, ""});
  fs::copy(missing, gap);
  fs::remove(missing + "/model_rank1.safetensors");
  JobResult result = run_job({2, sharded, "", missing});
  for (const auto& error : result.errors) {
    EXPECT_THAT(error, ::testing::HasSubstr("model_rank1.safetensors")) << error;
  }
  // The index loses the first piece of a tensor split between the processes.
  nlohmann::json index = nlohmann::json::parse(contents(gap + "/model_shards.json"));
  bool dropped = false;
  for (auto& [name, tensor] : index.at("tensors").items()) {
    if (tensor.at("pieces").size() < 2) continue;
    tensor.at("pieces").erase(0);
    dropped = true;
    break;
  }
  ASSERT_TRUE(dropped) << "no tensor is split between the 2 processes";
  std::ofstream(gap + "/model_shards.json") << index.dump(1);
  result = run_job({2, sharded, "", gap});
  for (const auto& error : result.errors) {
    EXPECT_THAT(error, ::testing::HasSubstr("model_shards.json: the pieces of tensor")) << error;
  }
}

// DeepSpeed's zero3_save_16bit_model under bf16: save_model writes (and
// get_state_dict returns) the weights in bf16, the trained fp32 weights
// rounded; without the flag they stay fp32. Training is the same.
TEST(Zero3Saving, SixteenBitModelUnderBf16IsWrittenInBf16) {
  accelerate::testing::TempDir dir("zero3-16bit");
  std::map<bool, std::vector<at::Tensor>> state;  // flag -> rank 0's get_state_dict
  for (bool sixteen_bit : {false, true}) {
    accelerate::testing::run_rank_communicators(2, [&](std::shared_ptr<Communicator> comm) {
      const int rank = comm->rank();
      Training job(std::move(comm),
                   AcceleratorOptions()
                       .mixed_precision(accelerate::MixedPrecision::kBF16)
                       .deepspeed_plugin(accelerate::DeepSpeedPlugin()
                                             .zero_stage(3)
                                             .zero3_save_16bit_model(sixteen_bit)
                                             .gradient_clipping(std::nullopt)),
                   48);
      job.train_epoch();
      job.accelerator.save_model(job.model, dir.path() + "/" + std::to_string(sixteen_bit));
      std::vector<at::Tensor> weights;
      for (const auto& entry : job.accelerator.get_state_dict(job.model)) {
        weights.push_back(entry.second);
      }
      if (rank == 0) state[sixteen_bit] = weights;
    });
  }
  const auto fp32 = accelerate::load_safetensors(dir.path() + "/0/model.safetensors");
  const auto bf16 = accelerate::load_safetensors(dir.path() + "/1/model.safetensors");
  ASSERT_EQ(fp32.size(), bf16.size());
  ASSERT_EQ(state[false].size(), state[true].size());
  for (std::size_t i = 0; i < fp32.size(); ++i) {
    EXPECT_EQ(fp32[i].second.scalar_type(), at::kFloat) << fp32[i].first;
    EXPECT_EQ(bf16[i].second.scalar_type(), at::kBFloat16) << bf16[i].first;
    EXPECT_TRUE(at::equal(bf16[i].second, fp32[i].second.to(at::kBFloat16))) << bf16[i].first;
  }
  for (std::size_t i = 0; i < state[true].size(); ++i) {
    EXPECT_EQ(state[true][i].scalar_type(), at::kBFloat16);
    EXPECT_TRUE(at::equal(state[true][i], state[false][i].to(at::kBFloat16)));
  }
}

}  // namespace zero3_saving_test
