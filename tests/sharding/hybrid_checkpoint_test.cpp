// save_state / load_state under hybrid sharding: one copy of the shards is
// saved (the first machine's processes write the model pieces and optimizer
// shards; every process its random states), a resumed hybrid run ends
// bitwise where the uninterrupted one does, and the checkpoint loads onto
// FULL_SHARD on another number of processes and onto one process (the
// optimizer state resharded exactly). Four thread ranks act as two machines
// of two, with real collectives.
#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "accelerate/accelerator/accelerator.h"
#include "accelerate/checkpoint/checkpointing.h"
#include "accelerate/checkpoint/safetensors.h"
#include "accelerate/sharding/fsdp_plugin.h"
#include "checkpoint/checkpoint_files.h"
#include "sharding/zero_test_model.h"
#include "sharding/zero_test_support.h"
#include "support/temp_dir.h"
#include "support/thread_ranks.h"

namespace hybrid_checkpoint_test {

namespace fs = std::filesystem;
using accelerate::Accelerator;
using accelerate::AcceleratorOptions;
using accelerate::Communicator;
using accelerate::FsdpAutoWrapPolicy;
using accelerate::FsdpShardingStrategy;
using accelerate::FsdpStateDictType;
using accelerate::FullyShardedDataParallelPlugin;
using accelerate::JobState;
using accelerate::testing::BlockStack;

struct HybridRun {
  FsdpShardingStrategy strategy = FsdpShardingStrategy::kHybridShard;
  int world = 4;
  int per_machine = 2;
  int steps = 6;        // in all; a resumed run skips the saved ones
  int save_after = -1;  // save_state after this many steps (-1: never)
  bool resume = false;  // load_state(checkpoint) first
  std::string checkpoint;
  std::string save_to;  // with resume: save_state here right after loading
};

AcceleratorOptions options_for(const HybridRun& run) {
  return AcceleratorOptions()
      .ddp_options(
          accelerate::GradientSyncOptions().bucket_cap_mb(0.002).first_bucket_cap_mb(0.0005))
      .fsdp_plugin(FullyShardedDataParallelPlugin()
                       .sharding_strategy(run.strategy)
                       .auto_wrap_policy(FsdpAutoWrapPolicy::kTransformerBasedWrap)
                       .transformer_cls_names_to_wrap({"ResidualBlock"})
                       .state_dict_type(FsdpStateDictType::kShardedStateDict));
}

// Each rank's whole weights at the end of `run`.
std::vector<std::vector<at::Tensor>> train(const HybridRun& run) {
  std::vector<std::vector<at::Tensor>> weights(static_cast<std::size_t>(run.world));
  accelerate::testing::run_ranks_of_jobs(
      run.world,
      [&](int rank) {
        JobState job = accelerate::testing::thread_rank_job(rank, run.world);
        job.node_rank = rank / run.per_machine;
        job.num_nodes = run.world / run.per_machine;
        job.local_rank = rank % run.per_machine;
        job.local_world_size = run.per_machine;
        return job;
      },
      [&](int rank, std::shared_ptr<Communicator> comm) {
        Accelerator accelerator(std::move(comm), options_for(run));
        BlockStack model;
        accelerate::Optimizer<torch::optim::AdamW> optimizer(model->parameters(),
                                                             torch::optim::AdamWOptions(0.01));
        accelerate::DataLoader loader(accelerate::testing::zero_data(240),
                                      accelerate::DataLoaderOptions(4));
        accelerator.prepare(model, optimizer, loader);
        int step = 0;
        if (run.resume) {
          accelerator.load_state(run.checkpoint);
          step = static_cast<int>(accelerator.step());
          if (!run.save_to.empty()) accelerator.save_state(run.save_to);
        }
        while (step < run.steps) {
          for (auto& batch : loader) {
            auto scope = accelerator.accumulate();
            accelerator.backward(torch::mse_loss(model->forward(batch.data), batch.target));
            accelerator.clip_grad_norm_(model->parameters(), 1.0);
            optimizer.step();
            optimizer.zero_grad();
            if (++step == run.save_after) accelerator.save_state(run.checkpoint);
            if (step == run.steps) break;
          }
        }
        weights[static_cast<std::size_t>(rank)] =
            accelerate::testing::whole_weights(accelerator, *model);
      });
  return weights;
}

void expect_bitwise(const std::vector<std::vector<at::Tensor>>& got,
                    const std::vector<at::Tensor>& want) {
  for (std::size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].size(), want.size()) << "rank " << r;
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(at::equal(got[r][i], want[i])) << "rank " << r << " tensor " << i;
    }
  }
}

// Every tensor of a save_state folder's whole optimizer state, by name.
std::map<std::string, at::Tensor> whole_optimizer_state(const std::string& folder) {
  const accelerate::checkpoint::CheckpointFiles files(folder);
  std::map<std::string, at::Tensor> state;
  for (auto& [name, tensor] : accelerate::load_safetensors(
           accelerate::checkpoint::CheckpointFiles::tensors_beside(files.optimizer(0)))) {
    state[name] = tensor;
  }
  return state;
}

TEST(HybridCheckpoint, OneCopyIsSavedAndAResumedRunEndsBitwiseWhereTheUninterruptedOneDoes) {
  for (FsdpShardingStrategy strategy :
       {FsdpShardingStrategy::kHybridShard, FsdpShardingStrategy::kHybridShardZero2}) {
    SCOPED_TRACE(accelerate::to_string(strategy));
    accelerate::testing::TempDir folder("hybrid-checkpoint");
    HybridRun whole;
    whole.strategy = strategy;
    const auto uninterrupted = train(whole);
    HybridRun saving = whole;
    saving.save_after = 3;
    saving.checkpoint = folder.file("ckpt");
    train(saving);

    // One copy of the shards, from the first machine's two processes.
    const accelerate::CheckpointMetadata metadata =
        accelerate::read_checkpoint_metadata(saving.checkpoint);
    EXPECT_EQ(metadata.world_size, 4);
    EXPECT_EQ(metadata.shard_world_size, 2);
    const accelerate::checkpoint::CheckpointFiles files(saving.checkpoint);
    const bool pieces =
        strategy == FsdpShardingStrategy::kHybridShard;  // stage 3's sharded state dict
    for (int rank = 0; rank < 4; ++rank) {
      SCOPED_TRACE("rank " + std::to_string(rank));
      EXPECT_EQ(fs::exists(files.optimizer_shard(0, rank)), rank < 2);
      EXPECT_EQ(fs::exists(files.model_piece(0, rank)), pieces && rank < 2);
      EXPECT_TRUE(fs::exists(files.random_states(rank)));
    }
    EXPECT_EQ(fs::exists(files.model_pieces_index(0)), pieces);

    HybridRun resumed = saving;
    resumed.save_after = -1;
    resumed.resume = true;
    expect_bitwise(train(resumed), uninterrupted[0]);
    for (const auto& rank_weights : uninterrupted) expect_bitwise({rank_weights}, uninterrupted[0]);
  }
}

TEST(HybridCheckpoint, LoadsOntoFullShardOnThreeProcessesAndOntoOneWithTheExactOptimizerState) {
  accelerate::testing::TempDir folder("hybrid-reshard");
  HybridRun saving;
  saving.save_after = saving.steps = 3;
  saving.checkpoint = folder.file("hybrid");
  const auto saved_weights = train(saving);

  // Hybrid (2 machines of 2) -> one process: saves the whole state.
  HybridRun one;
  one.world = one.per_machine = 1;
  one.resume = true;
  one.steps = 3;
  one.checkpoint = saving.checkpoint;
  one.save_to = folder.file("one");
  expect_bitwise(train(one), saved_weights[0]);

  // Hybrid -> FULL_SHARD on 3 -> one process: the same whole state, bitwise.
  HybridRun three = one;
  three.strategy = FsdpShardingStrategy::kFullShard;
  three.world = three.per_machine = 3;
  three.save_to = folder.file("three");
  expect_bitwise(train(three), saved_weights[0]);
  HybridRun back = one;
  back.checkpoint = folder.file("three");
  back.save_to = folder.file("three-then-one");
  expect_bitwise(train(back), saved_weights[0]);

  const auto direct = whole_optimizer_state(folder.file("one"));
  const auto via_three = whole_optimizer_state(folder.file("three-then-one"));
  ASSERT_FALSE(direct.empty());
  ASSERT_EQ(direct.size(), via_three.size());
  for (const auto& [name, tensor] : direct) {
    ASSERT_TRUE(via_three.count(name)) << name;
    EXPECT_TRUE(at::equal(tensor, via_three.at(name))) << name;
  }
}

}  // namespace hybrid_checkpoint_test
